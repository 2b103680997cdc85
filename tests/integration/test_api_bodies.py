"""Request bodies the API must read honestly: deep nesting is a 400 (never a RecursionError's
500), a chunked body is read (ASGI) or answered 411 (WSGI), never taken for an empty one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

import jobs
from jobs import registry
from jobs.exceptions import ValidationFailed
from jobs.models import Job, Tenant
from tests.integration.api_helpers import error_code, submit, token_client
from tests.production_server import PROXY_HEADERS, ProductionServer

DEFAULT_DEPTH = 64  # JOBS_MAX_INPUT_DEPTH's default
NESTED_KIND = "test.nested"  # objects inside objects all the way down: jsonschema recurses


def nested(depth: int) -> dict[str, Any]:
    """An object `depth` levels deep: {"a": {"a": ... {} ...}}."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def deep_body(depth: int) -> bytes:
    """A submission whose body nests `depth` levels (its input one fewer)."""
    return b'{"kind": "noop", "input": ' + b'{"a": ' * (depth - 2) + b"{}" + b"}" * (depth - 1)


@pytest.fixture
def nested_kind() -> Iterator[str]:
    schema = {"type": "object", "additionalProperties": {"$ref": "#"}}
    registry.handler(NESTED_KIND, input_schema=schema)(lambda ctx, input: {})
    yield NESTED_KIND
    registry.unregister(NESTED_KIND)


# --- nesting depth -----------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [500, 10_000])
def test_deep_body_is_400_naming_the_limit__submit_and_cancel(alice: Any, depth: int) -> None:
    client = token_client(alice)
    job = jobs.submit(kind="noop", input={}, owner=alice)
    for path in ("/api/jobs/", f"/api/jobs/{job.pk}/cancel/"):
        response = client.post(path, data=deep_body(depth), content_type="application/json")
        assert response.status_code == 400, (path, response.content[:300])
        assert error_code(response) == "too_deep"
        message = response.json()["error"]["message"]
        assert f"{depth} levels" in message and "65" in message, message
        assert "JOBS_MAX_INPUT_DEPTH=64" in message, message
    assert Job.objects.count() == 1
    assert Job.objects.get().state == "queued"  # the cancel was refused, not half-read


@pytest.mark.django_db
def test_deep_body_is_400__brackets_inside_strings_do_not_count(alice: Any) -> None:
    client = token_client(alice)
    text = {"kind": "noop", "input": {"note": "[{" * 5_000}}
    assert submit(client, text).status_code == 202
    over = client.post(
        "/api/jobs/", data=deep_body(DEFAULT_DEPTH + 2), content_type="application/json"
    )
    assert over.status_code == 400 and error_code(over) == "too_deep"
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_deep_body_is_400__in_another_charset_too(alice: Any) -> None:
    client = token_client(alice)

    def post(body: bytes, charset: str) -> Any:
        content_type = f"application/json; charset={charset}"
        return client.generic("POST", "/api/jobs/", body, content_type=content_type)

    fine = json.dumps({"kind": "noop", "input": {"n": "\u00e9"}}, ensure_ascii=False)
    assert post(fine.encode("utf-16"), "utf-16").status_code == 202
    deep = post(deep_body(500).decode().encode("utf-16"), "utf-16")
    assert deep.status_code == 400 and error_code(deep) == "too_deep"
    compressed = post(b"{}", "bz2_codec")  # bytes to bytes: not a text encoding
    assert compressed.status_code == 400 and error_code(compressed) == "parse_error"
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_depth_limit_is_a_setting__read_at_request_time(alice: Any, settings: Any) -> None:
    settings.JOBS_MAX_INPUT_DEPTH = 5
    client = token_client(alice)
    assert submit(client, {"kind": "noop", "input": nested(5)}).status_code == 202
    response = submit(client, {"kind": "noop", "input": nested(6)})
    assert response.status_code == 400 and error_code(response) == "too_deep"
    assert "over the limit of 6" in response.json()["error"]["message"]
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_input_at_the_depth_limit_is_accepted__schema_checked_stored_and_replayed(
    alice: Any, nested_kind: str
) -> None:
    client = token_client(alice)
    body = {"kind": nested_kind, "input": nested(DEFAULT_DEPTH)}
    first = submit(client, body, key="deep-1")
    assert first.status_code == 202, first.content[:500]
    again = submit(client, body, key="deep-1")  # the canonical hash of the same deep input
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.get().input == nested(DEFAULT_DEPTH)
    refused = submit(client, {"kind": nested_kind, "input": {"a": 1}})
    assert refused.status_code == 400 and error_code(refused) == "invalid_input"


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [DEFAULT_DEPTH + 1, 100_000])
def test_python_submit_deeper_than_the_limit__validation_failed(alice: Any, depth: int) -> None:
    with pytest.raises(ValidationFailed, match="JOBS_MAX_INPUT_DEPTH=64"):
        jobs.submit(kind="noop", input=nested(depth), owner=alice)
    assert Job.objects.count() == 0


# --- chunked bodies: WSGI cannot know their length ---------------------------------------------


@pytest.mark.django_db
def test_chunked_body_under_wsgi_is_411__not_an_empty_body(alice: Any) -> None:
    response = token_client(alice).post(
        "/api/jobs/",
        data=json.dumps({"kind": "noop", "input": {}}),
        content_type="application/json",
        CONTENT_LENGTH="",  # what a WSGI server gives Django for a chunked body
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert response.status_code == 411, response.content
    assert error_code(response) == "length_required"
    assert "Content-Length" in response.json()["error"]["message"]
    assert Job.objects.count() == 0


# --- the production server (gunicorn + uvicorn): chunked bodies are read -----------------------


@pytest.fixture
def token() -> str:
    user = User.objects.create_user(username="chunky", password="pw")
    Tenant.objects.create(name="chunks").members.add(user)
    return Token.objects.create(user=user).key


def _post(
    production_web: ProductionServer,
    token: str,
    chunks: list[bytes],
    path: str = "/api/jobs/",
    content_type: str = "application/json",
) -> tuple[int, dict[str, Any]]:
    """POST `chunks` with Transfer-Encoding: chunked and no Content-Length."""
    conn = production_web.connection(timeout=30)
    try:
        headers = {
            **PROXY_HEADERS,
            "Authorization": f"Token {token}",
            "Content-Type": content_type,
            "Transfer-Encoding": "chunked",
        }
        conn.request("POST", path, body=iter(chunks), headers=headers, encode_chunked=True)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def _plain_post(
    production_web: ProductionServer, token: str, body: bytes
) -> tuple[int, dict[str, Any]]:
    conn = production_web.connection(timeout=30)
    try:
        headers = {
            **PROXY_HEADERS,
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
        }
        conn.request("POST", "/api/jobs/", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


@pytest.mark.timeout(180)
def test_production_server_reads_bodies_honestly__chunked_oversized_and_deep(
    production_web: ProductionServer, token: str
) -> None:
    body = json.dumps({"kind": "noop", "input": {"n": 1}}).encode()
    status, answer = _post(production_web, token, [body[:10], body[10:25], body[25:]])
    assert status == 202, answer
    assert Job.objects.get(pk=answer["id"]).input == {"n": 1}

    # Over the body limit (64 KiB of input + 8 KiB): measured, refused, never parsed.
    blob = json.dumps({"kind": "noop", "input": {"blob": "x" * 100_000}}).encode()
    status, answer = _post(
        production_web, token, [blob[i : i + 8192] for i in range(0, len(blob), 8192)]
    )
    assert status == 413, answer
    assert answer["error"]["code"] == "too_large"

    # A multipart upload, chunked: Django's form parser reads it by the measured length too.
    boundary = "chunked-upload"
    form = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; filename="rows.csv"\r\n'
        "Content-Type: text/csv\r\n\r\n"
        "a,b\n1,2\n\r\n"
        f"--{boundary}--\r\n"
    ).encode()
    multipart = f"multipart/form-data; boundary={boundary}"
    status, answer = _post(
        production_web, token, [form[:40], form[40:]], "/api/objects/", multipart
    )
    assert status == 201, answer
    assert answer["size"] == 8 and answer["tenant"] == "chunks"

    for depth in (500, 10_000):
        status, answer = _plain_post(production_web, token, deep_body(depth))
        assert status == 400, answer
        assert answer["error"]["code"] == "too_deep", answer
    status, answer = _post(production_web, token, [deep_body(10_000)])
    assert status == 400 and answer["error"]["code"] == "too_deep", answer

    assert Job.objects.count() == 1
