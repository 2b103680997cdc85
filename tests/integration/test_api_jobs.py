"""HTTP API: every status code, replay and conflict, tenants, throttling, long-poll, tokens."""

from __future__ import annotations

import json
import threading
import time
from io import StringIO
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.authtoken.models import Token

import jobs
from jobs.models import Job, StoredObject, Tenant
from outbox.models import OutboxEntry
from tests.integration.api_helpers import error_code, long_poll_while, member, submit, token_client

pytestmark = pytest.mark.django_db
# Tests that need other connections to see committed rows (threads, the runtime's heartbeat).
committed = pytest.mark.django_db(transaction=True)

REPORT = {"kind": "report.generate", "input": {"title": "Q3"}}


@pytest.fixture
def mallory(django_user_model: Any) -> Any:
    return member(django_user_model, "mallory", "evil")


# --- submission --------------------------------------------------------------------------


@committed
def test_submit_returns_202_with_location__after_commit(alice: Any) -> None:
    response = submit(token_client(alice), REPORT, key="k-1")
    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"id", "status", "status_url", "created_at"}
    assert body["status"] == "queued"
    assert response["Location"] == f"/api/jobs/{body['id']}/" == body["status_url"]
    assert response["Idempotent-Replayed"] == "false"
    # Committed, not just written: visible from a brand-new connection.
    connection.close()
    job = Job.objects.get(pk=body["id"])
    assert job.tenant is not None and job.tenant.name == "acme"
    assert OutboxEntry.objects.filter(job_id=job.pk).count() == 1


def test_submit_replays_the_same_job__same_key_and_body(alice: Any) -> None:
    client = token_client(alice)
    first = submit(client, REPORT, key="k-1")
    again = submit(client, REPORT, key="k-1")
    assert again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1


def test_submit_is_409__same_key_different_body(alice: Any) -> None:
    client = token_client(alice)
    submit(client, REPORT, key="k-1")
    response = submit(client, {**REPORT, "input": {"title": "Q4"}}, key="k-1")
    assert response.status_code == 409
    assert error_code(response) == "idempotency_conflict"
    assert "different request body" in response.json()["error"]["message"]
    assert Job.objects.count() == 1


def test_submit_same_business_key_by_someone_else__their_own_job_never_mine(
    django_user_model: Any,
) -> None:
    """business_key is scoped to the tenant (or owner): no collision, no job handed over."""
    first = django_user_model.objects.create_user(username="solo1")
    second = django_user_model.objects.create_user(username="solo2")
    body = {"kind": "noop", "input": {}, "business_key": "invoice-7"}
    mine = submit(token_client(first), body)
    theirs = submit(token_client(second), body)
    assert (mine.status_code, theirs.status_code) == (202, 202)
    assert mine.json()["id"] != theirs.json()["id"]
    assert theirs["Idempotent-Replayed"] == "false"


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"kind": "no.such.kind", "input": {}}, "unknown_kind", "kind"),
        ({"kind": "report.generate", "input": {"rows": []}}, "invalid_input", "input"),
        ({"kind": "noop", "input": [1, 2]}, "invalid", "input"),
        ({"input": {}}, "invalid", "kind"),
        ({"kind": "noop", "input_version": 0}, "invalid", "input_version"),
    ],
)
def test_submit_is_400__invalid_body(
    alice: Any, body: dict[str, Any], code: str, field: str
) -> None:
    response = submit(token_client(alice), body)
    assert response.status_code == 400
    assert error_code(response) == code
    assert field in response.json()["error"]["details"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "noop", "bussiness_key": "typo"}, "bussiness_key"),  # unknown: not ignored
        ({"kind": "noop", "business_key": 7}, "business_key"),  # a number is not a string
        ({"kind": "noop", "business_key": ""}, "business_key"),
        ({"kind": "noop", "input_version": "2"}, "input_version"),
        ({"kind": "noop", "input_version": 2.0}, "input_version"),
        ({"kind": "noop", "input_version": True}, "input_version"),
        ({"kind": "noop", "tenant": " acme"}, "tenant"),  # not trimmed into a valid name
        ({"kind": "noop", "input_ref": "0" * 32}, "input_ref"),  # only the 8-4-4-4-12 spelling
        ({"kind": "noop", "input": None}, "input"),
        ({"kind": "noop\n"}, "kind"),
        ({"kind": 5}, "kind"),
    ],
)
def test_submit_is_400__body_outside_the_schema(
    alice: Any, body: dict[str, Any], field: str
) -> None:
    response = submit(token_client(alice), body)
    assert response.status_code == 400, response.content
    assert error_code(response) == "invalid"
    assert field in response.json()["error"]["details"]
    assert Job.objects.count() == 0


def test_submit_is_400__every_unknown_field_named_with_the_other_errors(alice: Any) -> None:
    response = submit(token_client(alice), {"input_version": 0, "extra": 1})
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"kind", "input_version", "extra"}


def test_submit_accepts_null_values_inside_input(alice: Any) -> None:
    response = submit(token_client(alice), {"kind": "noop", "input": {"reviewer": None}})
    assert response.status_code == 202, response.content
    assert Job.objects.get().input == {"reviewer": None}


def test_submit_is_400__nul_characters_postgres_cannot_store(alice: Any) -> None:
    client = token_client(alice)
    for body in (
        {"kind": "noop", "input": {"a": "x\u0000y"}},
        {"kind": "noop\u0000"},
        {"kind": "noop", "input": {"k\u0000": 1}},
    ):
        response = submit(client, body)
        assert response.status_code == 400, body
    assert client.get("/api/jobs/", {"kind": "noop\x00"}).status_code == 400
    assert Job.objects.count() == 0


def test_submit_is_400__malformed_json(alice: Any) -> None:
    response = token_client(alice).post(
        "/api/jobs/", data=b'{"kind": "noop", ', content_type="application/json"
    )
    assert response.status_code == 400
    assert error_code(response) == "parse_error"


@pytest.mark.parametrize("key", ["", "x" * 201, "has space", "caf\u00e9", " padded "])
def test_submit_is_400__bad_idempotency_key(alice: Any, key: str) -> None:
    response = token_client(alice).post(
        "/api/jobs/",
        data=json.dumps(REPORT),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert response.status_code == 400
    assert error_code(response) == "invalid_header"


def test_submit_is_413__input_over_max_input_bytes(alice: Any, settings: Any) -> None:
    settings.JOBS_MAX_INPUT_BYTES = 1000
    response = submit(token_client(alice), {"kind": "noop", "input": {"blob": "x" * 2000}})
    assert response.status_code == 413
    assert error_code(response) == "input_too_large"
    assert "JOBS_MAX_INPUT_BYTES" in response.json()["error"]["message"]


def test_submit_is_413__raw_body_over_limit_is_never_parsed(alice: Any, settings: Any) -> None:
    settings.JOBS_MAX_INPUT_BYTES = 1000
    response = token_client(alice).post(
        "/api/jobs/", data=b"{" + b" " * 20_000 + b"broken", content_type="application/json"
    )
    assert response.status_code == 413
    assert error_code(response) == "too_large"


def test_submit_is_415__not_json(alice: Any) -> None:
    response = token_client(alice).post("/api/jobs/", data="kind=noop", content_type="text/plain")
    assert response.status_code == 415
    assert error_code(response) == "unsupported_media_type"


def test_api_is_401__without_or_with_bad_token(alice: Any) -> None:
    from django.test import Client

    anonymous = Client().get("/api/jobs/")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Token")
    assert error_code(anonymous) == "not_authenticated"
    bad = Client(HTTP_AUTHORIZATION="Token nope").post("/api/jobs/")
    assert bad.status_code == 401
    assert error_code(bad) == "authentication_failed"


def test_api_is_405__wrong_method(alice: Any) -> None:
    response = token_client(alice).delete("/api/jobs/")
    assert response.status_code == 405
    assert error_code(response) == "method_not_allowed"


# --- tenants -------------------------------------------------------------------------------


def test_submit_is_404__tenant_not_a_member_looks_like_no_tenant(alice: Any, mallory: Any) -> None:
    """Like another tenant's `input_ref`: a 404 that says nothing about whether it exists."""
    client = token_client(alice)
    theirs = submit(client, {**REPORT, "tenant": "evil"})
    missing = submit(client, {**REPORT, "tenant": "no-such-tenant"})
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    assert error_code(theirs) == "not_found"
    upload = _upload(client, b"x", tenant="evil")
    assert upload.status_code == 404 and upload.json() == theirs.json()
    assert Job.objects.count() == StoredObject.objects.count() == 0


def test_submit_is_400__several_tenants_and_none_named(alice: Any) -> None:
    Tenant.objects.create(name="second").members.add(alice)
    response = submit(token_client(alice), REPORT)
    assert response.status_code == 400
    assert "tenant" in response.json()["error"]["details"]
    named = submit(token_client(alice), {**REPORT, "tenant": "second"})
    assert named.status_code == 202
    assert Job.objects.get(pk=named.json()["id"]).tenant.name == "second"  # type: ignore[union-attr]


def test_other_tenants_job_is_404_everywhere__never_403(alice: Any, mallory: Any) -> None:
    job_id = submit(token_client(alice), REPORT).json()["id"]
    intruder = token_client(mallory)
    for response in (
        intruder.get(f"/api/jobs/{job_id}/"),
        intruder.get(f"/api/jobs/{job_id}/result/"),
        intruder.post(f"/api/jobs/{job_id}/cancel/"),
    ):
        assert response.status_code == 404
        assert error_code(response) == "not_found"
    assert intruder.get("/api/jobs/").json()["results"] == []
    assert Job.objects.get(pk=job_id).state == "queued"


@pytest.mark.parametrize("job_id", ["not-a-uuid", "00000000-0000-0000-0000-000000000000"])
def test_job_status_is_404__unknown_or_malformed_id(alice: Any, job_id: str) -> None:
    response = token_client(alice).get(f"/api/jobs/{job_id}/")
    assert response.status_code == 404
    assert error_code(response) == "not_found"


# --- status, result, cancel, list ----------------------------------------------------------


@committed
def test_job_status_shows_client_names__queued_then_succeeded(alice: Any) -> None:
    client = token_client(alice)
    job_id = submit(client, {"kind": "noop", "input": {}}).json()["id"]
    queued = client.get(f"/api/jobs/{job_id}/").json()
    assert queued["status"] == "queued"
    assert queued["attempts"] == 0 and queued["result_url"] is None and queued["error"] is None
    jobs.execute(job_id)
    done = client.get(f"/api/jobs/{job_id}/").json()
    assert done["status"] == "succeeded"
    assert done["attempts"] == 1 and done["started_at"] and done["finished_at"]
    assert done["result_url"] == f"/api/jobs/{job_id}/result/"


@committed
def test_result_is_409_while_not_finished__then_200(alice: Any) -> None:
    client = token_client(alice)
    job_id = submit(client, {"kind": "noop", "input": {}}).json()["id"]
    early = client.get(f"/api/jobs/{job_id}/result/")
    assert early.status_code == 409
    assert error_code(early) == "not_finished"
    jobs.execute(job_id)
    result = client.get(f"/api/jobs/{job_id}/result/")
    assert result.status_code == 200
    assert result.json() == {
        "id": job_id,
        "status": "succeeded",
        "result": {"ok": True},
        "error": None,
    }


@committed
def test_result_shows_error__permanent_failure(alice: Any) -> None:
    client = token_client(alice)
    job_id = submit(client, {"kind": "drill.malformed", "input": {"document_id": "x"}}).json()["id"]
    jobs.execute(job_id)
    status = client.get(f"/api/jobs/{job_id}/").json()
    assert status["status"] == "failed"
    assert status["error"]["category"] == "permanent"
    result = client.get(f"/api/jobs/{job_id}/result/").json()
    assert result["result"] is None and result["error"]["category"] == "permanent"


@committed
def test_cancel_stops_a_queued_job__and_409_once_finished(alice: Any) -> None:
    client = token_client(alice)
    queued_id = submit(client, {"kind": "noop", "input": {}}).json()["id"]
    cancelled = client.post(f"/api/jobs/{queued_id}/cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert client.post(f"/api/jobs/{queued_id}/cancel/").status_code == 200  # idempotent
    done_id = submit(client, {"kind": "noop", "input": {"n": 2}}).json()["id"]
    jobs.execute(done_id)
    refused = client.post(f"/api/jobs/{done_id}/cancel/")
    assert refused.status_code == 409
    assert error_code(refused) == "invalid_transition"


@committed
def test_list_filters_by_status_and_kind__paginated(alice: Any) -> None:
    client = token_client(alice)
    ids = [submit(client, {"kind": "noop", "input": {"n": n}}).json()["id"] for n in range(3)]
    submit(client, REPORT)
    jobs.execute(ids[0])
    page = client.get("/api/jobs/", {"status": "queued", "kind": "noop", "page_size": "1"}).json()
    assert page["count"] == 2 and len(page["results"]) == 1 and page["next"]
    assert {
        r["id"] for r in client.get("/api/jobs/", {"status": "succeeded"}).json()["results"]
    } == {ids[0]}
    bad = client.get("/api/jobs/", {"status": "leased"})
    assert bad.status_code == 400 and "status" in bad.json()["error"]["details"]
    assert client.get("/api/jobs/", {"page": 99}).status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        {"page_size": "null"},
        {"page_size": ""},
        {"page_size": "0"},
        {"page_size": "201"},  # refused, not silently cut to 200
        {"page_size": "5.0"},
        {"page": "0"},
        {"page": "last"},
        {"page": "abc"},
        {"status": ""},
        {"kind": ""},
        {"kind": "no such kind"},
        {"kind": "k" * 101},
        {"status": ["queued", "failed"]},  # one value, not whichever comes last
        {"page_size": ["5", "5"]},
    ],
)
def test_list_is_400__parameter_outside_the_schema(alice: Any, query: dict[str, Any]) -> None:
    response = token_client(alice).get("/api/jobs/", query)
    assert response.status_code == 400, response.content
    assert error_code(response) == "invalid"
    assert set(response.json()["error"]["details"]) == set(query)


def test_list_page_size__up_to_200(alice: Any) -> None:
    client = token_client(alice)
    for n in range(3):
        submit(client, {"kind": "noop", "input": {"n": n}})
    page = client.get("/api/jobs/", {"page_size": 200, "page": 1}).json()
    assert page["count"] == 3 and len(page["results"]) == 3 and page["next"] is None


# --- long-poll -------------------------------------------------------------------------------


@committed
def test_wait_returns_as_soon_as_status_changes__cancel_from_another_connection(
    alice: Any, settings: Any
) -> None:
    settings.JOBS_API_POLL_INTERVAL = 0.05
    client = token_client(alice)
    job_id = submit(client, {"kind": "noop", "input": {}}).json()["id"]
    response, elapsed = long_poll_while(
        client, job_id, lambda: jobs.services.job_cancel(job_id=job_id, actor="test"), after=0.3
    )
    assert response.json()["status"] == "cancelled"
    assert elapsed < 20


def test_wait_is_capped__and_400_when_not_a_number(alice: Any, settings: Any) -> None:
    settings.JOBS_API_MAX_WAIT_SECONDS = 0.3
    client = token_client(alice)
    job_id = submit(client, {"kind": "noop", "input": {}}).json()["id"]
    began = time.monotonic()
    assert client.get(f"/api/jobs/{job_id}/", {"wait": 3600}).json()["status"] == "queued"
    assert time.monotonic() - began < 30
    assert client.get(f"/api/jobs/{job_id}/", {"wait": "1e400"}).status_code == 200  # capped
    for bad in ("soon", "-1", "nan", "inf", "", " 1", "1e", "0x10", ["1", "2"]):
        response = client.get(f"/api/jobs/{job_id}/", {"wait": bad})
        assert response.status_code == 400, bad
        assert "wait" in response.json()["error"]["details"]


# --- throttling ------------------------------------------------------------------------------


def test_user_rate_limit_is_429_with_retry_after(alice: Any, settings: Any) -> None:
    settings.JOBS_THROTTLE_USER = "3/min"
    client = token_client(alice)
    assert [client.get("/api/jobs/").status_code for _ in range(3)] == [200, 200, 200]
    limited = client.get("/api/jobs/")
    assert limited.status_code == 429
    assert error_code(limited) == "throttled"
    assert 0 < int(limited["Retry-After"]) <= 60


def test_tenant_rate_limit_is_shared_by_members(
    alice: Any, django_user_model: Any, settings: Any
) -> None:
    settings.JOBS_THROTTLE_USER = "off"
    settings.JOBS_THROTTLE_TENANT = "2/hour"
    colleague = member(django_user_model, "carol", "acme")
    assert submit(token_client(alice), {"kind": "noop", "input": {"n": 1}}).status_code == 202
    assert submit(token_client(colleague), {"kind": "noop", "input": {"n": 2}}).status_code == 202
    limited = submit(token_client(colleague), {"kind": "noop", "input": {"n": 3}})
    assert limited.status_code == 429
    assert "Retry-After" in limited
    assert token_client(colleague).get("/api/jobs/").status_code == 200  # reads stay open


# --- objects ---------------------------------------------------------------------------------


def _upload(client: Any, data: bytes, **extra: Any) -> Any:
    return client.post("/api/objects/", {"file": SimpleUploadedFile("in.csv", data), **extra})


def test_upload_is_201__stored_through_storage_and_owned_by_tenant(alice: Any) -> None:
    response = _upload(token_client(alice), b"a,b\n1,2\n")
    assert response.status_code == 201
    body = response.json()
    assert body["size"] == 8 and body["tenant"] == "acme"
    assert response["Location"] == f"/api/objects/{body['id']}/"
    stored = StoredObject.objects.get(pk=body["id"])
    assert stored.owner == alice and str(body["id"]) in stored.storage_name


def test_object_metadata_is_200__for_the_uploader(alice: Any) -> None:
    client = token_client(alice)
    uploaded = _upload(client, b"a,b\n1,2\n")
    response = client.get(uploaded["Location"])
    assert response.status_code == 200
    assert response.json() == uploaded.json()
    assert set(response.json()) == {"id", "size", "sha256", "content_type", "tenant", "created_at"}


def test_upload_is_400__empty_tenant_or_an_unknown_part(alice: Any) -> None:
    client = token_client(alice)
    empty = _upload(client, b"x", tenant="")
    assert empty.status_code == 400 and "tenant" in empty.json()["error"]["details"]
    extra = _upload(client, b"x", note="hello")
    assert extra.status_code == 400 and "note" in extra.json()["error"]["details"]
    assert StoredObject.objects.count() == 0


def test_upload_is_413__over_max_object_bytes(alice: Any, settings: Any) -> None:
    settings.JOBS_MAX_OBJECT_BYTES = 100
    response = _upload(token_client(alice), b"x" * 200)
    assert response.status_code == 413
    assert error_code(response) == "input_too_large"
    assert StoredObject.objects.count() == 0


def test_upload_is_400_without_file__and_415_for_json(alice: Any) -> None:
    client = token_client(alice)
    missing = client.post("/api/objects/", {"other": "x"})
    assert missing.status_code == 400
    assert set(missing.json()["error"]["details"]) == {"file", "other"}
    as_json = client.post("/api/objects/", data="{}", content_type="application/json")
    assert as_json.status_code == 415


def test_other_tenants_object_is_404__in_a_job_and_directly(alice: Any, mallory: Any) -> None:
    object_id = _upload(token_client(alice), b"secret").json()["id"]
    intruder = token_client(mallory)
    response = submit(intruder, {"kind": "drill.read_input", "input": {}, "input_ref": object_id})
    assert response.status_code == 404
    assert error_code(response) == "not_found"
    assert intruder.get(f"/api/objects/{object_id}/").status_code == 404
    assert Job.objects.count() == 0
    own = submit(token_client(alice), {"kind": "drill.read_input", "input_ref": object_id})
    assert own.status_code == 202


# --- concurrency -----------------------------------------------------------------------------


@committed
def test_replay_storm_makes_one_job__20_parallel_requests_one_key(alice: Any) -> None:
    """Each thread has its own client and its own database connection; one job wins."""
    token_client(alice)  # create the token before the storm
    barrier = threading.Barrier(20)
    answers: list[tuple[int, str, str]] = []
    lock = threading.Lock()

    def fire() -> None:
        try:
            client = token_client(alice)
            barrier.wait(30)
            response = submit(client, REPORT, key="storm-key")
            with lock:
                answers.append(
                    (
                        response.status_code,
                        response.json().get("id", ""),
                        response.get("Idempotent-Replayed", ""),
                    )
                )
        finally:
            connection.close()

    threads = [threading.Thread(target=fire) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 20
    assert {status for status, _, _ in answers} == {202}
    assert len({job_id for _, job_id, _ in answers}) == 1
    assert sorted(replayed for _, _, replayed in answers).count("false") == 1
    assert Job.objects.filter(idempotency_key="storm-key").count() == 1
    assert OutboxEntry.objects.count() == 1


# --- jobs_token --------------------------------------------------------------------------------


def test_jobs_token_creates_user_tenant_and_token__idempotent() -> None:
    out = StringIO()
    call_command("jobs_token", "dora", "--tenant", "labs", stdout=out)
    key = out.getvalue().strip()
    token = Token.objects.get(key=key)
    assert token.user.username == "dora"
    assert list(token.user.tenants.values_list("name", flat=True)) == ["labs"]
    again = StringIO()
    call_command("jobs_token", "dora", "--tenant", "labs", stdout=again)
    assert again.getvalue().strip() == key
    response = submit(token_client(token.user), {"kind": "noop", "input": {}})
    assert response.status_code == 202


def test_jobs_token_refuses_bad_names() -> None:
    with pytest.raises(CommandError, match="--tenant"):
        call_command("jobs_token", "dora", "--tenant", "not a slug")
    with pytest.raises(CommandError, match="USER"):
        call_command("jobs_token", "bad user!")


# --- schema and docs -----------------------------------------------------------------------


def test_schema_and_docs_are_served__without_login() -> None:
    from django.test import Client

    schema = Client().get("/api/schema/", {"format": "json"})
    assert schema.status_code == 200
    document = schema.json()
    assert document["openapi"].startswith("3.")
    assert {
        "/api/jobs/",
        "/api/jobs/{job_id}/",
        "/api/jobs/{job_id}/result/",
        "/api/jobs/{job_id}/cancel/",
        "/api/objects/",
    } <= set(document["paths"])
    docs = Client().get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()


@pytest.mark.parametrize(("method", "path"), [("get", "/api/nope/"), ("post", "/api/jobs")])
def test_unknown_api_path_is_json_404(alice: Any, method: str, path: str) -> None:
    response = getattr(token_client(alice), method)(path)
    assert response.status_code == 404
    assert error_code(response) == "not_found"


def test_unexpected_bug_is_json_500_without_details(alice: Any, monkeypatch: Any) -> None:
    def broken(user: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr("jobs.api.views.jobs_visible_to", broken)
    response = token_client(alice).get("/api/jobs/")
    assert response.status_code == 500
    assert error_code(response) == "server_error"
    assert b"secret internals" not in response.content
