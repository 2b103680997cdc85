"""Completion callbacks end to end in one process: a real receiver on 127.0.0.1 verifies
each signed POST; the database queues one delivery per job end, whatever path ends it."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

import jobs
from jobs.callbacks.delivery import callbacks_send_due
from jobs.callbacks.signing import SignatureInvalid, signature_verify
from jobs.exceptions import InvalidCallbackUrl
from jobs.models import CallbackAttempt, CallbackDelivery, Job, Tenant
from jobs.quarantine import quarantine_discard, quarantine_redrive
from jobs.runtime import Outcome
from jobs.services import job_cancel
from tests.callback_receiver import Receiver, callback_receiver
from tests.integration.api_helpers import error_code, submit, token_client

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "whsec_" + base64.b64encode(b"personal-callback-secret-32bytes").decode()
ACME_NEW = "whsec_" + base64.b64encode(b"acme-callback-secret-new-32bytes").decode()
ACME_OLD = "whsec_" + base64.b64encode(b"acme-callback-secret-old-32bytes").decode()


@pytest.fixture(autouse=True)
def _callbacks_to_loopback(settings: Any) -> None:
    """The suite's receiver listens on 127.0.0.1 over http: allowed here, explicitly."""
    settings.JOBS_CALLBACK_SECRETS = {"": SECRET, "acme": [ACME_NEW, ACME_OLD]}
    settings.JOBS_CALLBACK_ALLOW_HTTP = True
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.JOBS_CALLBACK_BASE_DELAY = 0.2
    settings.JOBS_CALLBACK_TIMEOUT = 5.0


def deliveries(job: Job) -> list[CallbackDelivery]:
    return list(CallbackDelivery.objects.filter(job=job))


def send_until(receiver: Receiver, count: int, *, timeout: float = 20.0) -> None:
    """Run the sender (as beat does) until the receiver has `count` requests."""
    from tests.harness import wait_until

    def sent() -> bool:
        callbacks_send_due()
        return len(receiver.requests()) >= count

    wait_until(sent, timeout=timeout, interval=0.1, what=f"{count} callback requests")


def test_succeeded_job__one_signed_delivery_the_receiver_verifies(user: Any) -> None:
    with callback_receiver() as receiver:
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        assert deliveries(job) == []  # not ended yet: nothing to say
        assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED
        [delivery] = deliveries(job)
        assert delivery.status == "pending" and delivery.event == "succeeded"
        assert delivery.webhook_id == f"job-{job.pk}-succeeded"

        send_until(receiver, 1)

        [request] = receiver.requests()
        assert request.path == "/hooks/jobs?src=test"
        assert signature_verify(SECRET, request.headers, request.body) == delivery.webhook_id
        assert request.headers["content-type"] == "application/json"
        body = request.json()
        assert body["type"] == "job.succeeded"
        data = body["data"]
        assert data["id"] == str(job.pk) and data["status"] == "succeeded"
        assert data["kind"] == "noop" and data["error"] is None
        assert data["result"] == Job.objects.get(pk=job.pk).result
        assert "input" not in data
        with pytest.raises(SignatureInvalid):
            signature_verify(ACME_NEW, request.headers, request.body)
        delivery.refresh_from_db()
        assert delivery.status == "delivered" and delivery.attempts == 1
        [attempt] = CallbackAttempt.objects.filter(delivery=delivery)
        assert attempt.outcome == "delivered" and attempt.status_code == 200
        assert attempt.duration_ms is not None


def test_tenant_job__signed_with_both_secrets_of_a_rotation(user: Any, tenant: Tenant) -> None:
    with callback_receiver() as receiver:
        job = jobs.submit(
            kind="noop", input={}, owner=user, tenant=tenant, callback_url=receiver.url
        )
        jobs.execute(job.pk)
        send_until(receiver, 1)
        [request] = receiver.requests()
        assert len(request.headers["webhook-signature"].split()) == 2
        for secret in (ACME_NEW, ACME_OLD):
            assert signature_verify(secret, request.headers, request.body)
        with pytest.raises(SignatureInvalid):
            signature_verify(SECRET, request.headers, request.body)
        assert request.json()["data"]["tenant"] == "acme"


def test_the_standard_webhooks_library_verifies_it(user: Any) -> None:
    standardwebhooks = pytest.importorskip("standardwebhooks")
    with callback_receiver() as receiver:
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        jobs.execute(job.pk)
        send_until(receiver, 1)
        [request] = receiver.requests()
        verified = standardwebhooks.Webhook(SECRET).verify(request.body, request.headers)
        assert verified["data"]["id"] == str(job.pk)


def test_cancelled_job__one_delivery_through_the_api(user: Any) -> None:
    with callback_receiver() as receiver:
        job = jobs.submit(
            kind="noop",
            input={},
            owner=user,
            callback_url=receiver.url,
            run_after=timezone.now() + timedelta(hours=1),
        )
        response = token_client(user).post(f"/api/jobs/{job.pk}/cancel/")
        assert response.status_code == 200
        [delivery] = deliveries(job)
        assert delivery.event == "cancelled"
        send_until(receiver, 1)
        [request] = receiver.requests()
        assert request.json()["data"]["status"] == "cancelled"
        assert request.json()["data"]["error"]["category"] == "cancelled"


def test_failed_job__quarantine_sends_nothing__the_discard_sends_failed(user: Any) -> None:
    with callback_receiver() as receiver:
        job = jobs.submit(
            kind="drill.malformed",
            input={"document_id": "x"},
            owner=user,
            callback_url=receiver.url,
        )
        assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED
        assert deliveries(job) == []  # an operator may still redrive it
        record = job.quarantines.get()
        quarantine_discard(record_id=record.pk, actor="carol", note="bad upstream data")
        [delivery] = deliveries(job)
        assert delivery.event == "failed"
        send_until(receiver, 1)
        data = receiver.requests()[0].json()["data"]
        assert data["status"] == "failed" and data["result"] is None


def test_redrive_then_success__one_delivery_says_succeeded(user: Any) -> None:
    """Quarantine is not an end: a redriven job that then succeeds sends one callback."""
    job = jobs.submit(
        kind="drill.malformed",
        input={"document_id": "x"},
        owner=user,
        callback_url="http://127.0.0.1:9/",
    )
    jobs.execute(job.pk)
    quarantine_redrive(record_id=job.quarantines.get().pk, actor="carol", note="retry")
    job.refresh_from_db()
    assert job.state == "queued" and deliveries(job) == []


def test_receiver_500_then_200__retried_with_backoff__same_webhook_id(user: Any) -> None:
    with callback_receiver(script=[500]) as receiver:
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        jobs.execute(job.pk)
        report = callbacks_send_due()
        assert report.retried == 1
        [delivery] = deliveries(job)
        assert delivery.status == "pending" and delivery.last_status_code == 500
        first = receiver.requests()[0]
        assert delivery.next_attempt_at is not None
        send_until(receiver, 2)
        second = receiver.requests()[1]

        assert first.webhook_id == second.webhook_id == delivery.webhook_id
        assert first.body == second.body  # the same notice, only the timestamp re-signed
        delivery.refresh_from_db()
        assert delivery.status == "delivered" and delivery.attempts == 2
        attempts = list(CallbackAttempt.objects.filter(delivery=delivery))
        assert [(a.number, a.outcome, a.status_code) for a in attempts] == [
            (1, "retry", 500),
            (2, "delivered", 200),
        ]
        shown = token_client(user).get(f"/api/jobs/{job.pk}/").json()["callback"]
        assert shown["url"] == receiver.url
        assert shown["delivery"]["status"] == "delivered"
        assert [a["status_code"] for a in shown["delivery"]["attempts"]] == [500, 200]


def test_receiver_410__fails_at_once(user: Any) -> None:
    with callback_receiver(script=[410]) as receiver:
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        jobs.execute(job.pk)
        assert callbacks_send_due().failed == 1
        [delivery] = deliveries(job)
        assert delivery.status == "failed" and "410" in delivery.last_error
        assert callbacks_send_due().claimed == 0
        assert len(receiver.requests()) == 1


def test_job_without_callback_url__writes_no_delivery_row(user: Any) -> None:
    done = jobs.submit(kind="noop", input={}, owner=user)
    jobs.execute(done.pk)
    waiting = jobs.submit(
        kind="noop", input={}, owner=user, run_after=timezone.now() + timedelta(hours=1)
    )
    job_cancel(job_id=waiting.pk, actor="test")
    assert CallbackDelivery.objects.count() == 0
    assert token_client(user).get(f"/api/jobs/{done.pk}/").json()["callback"] is None


def test_refused_destination_at_delivery__recorded__never_retried(user: Any, settings: Any) -> None:
    """Accepted while 127.0.0.0/8 was allowed; refused when it no longer is: one attempt
    records why, and the delivery fails instead of retrying."""
    with callback_receiver() as receiver:
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        jobs.execute(job.pk)
        settings.JOBS_CALLBACK_ALLOWED_NETWORKS = []
        assert callbacks_send_due().failed == 1
        [delivery] = deliveries(job)
        assert delivery.status == "failed"
        assert "refused destination" in delivery.last_error
        assert callbacks_send_due().claimed == 0
        assert receiver.requests() == []


def test_a_name_that_resolves_to_loopback__refused_at_delivery(user: Any, settings: Any) -> None:
    with callback_receiver() as receiver:
        url = f"http://localhost:{receiver.port}/"
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=url)
        jobs.execute(job.pk)
        settings.JOBS_CALLBACK_ALLOWED_NETWORKS = []
        assert callbacks_send_due().failed == 1
        assert "resolves to" in deliveries(job)[0].last_error
        assert receiver.requests() == []


def test_a_tenant_without_a_secret__refused_at_submit(user: Any, settings: Any) -> None:
    settings.JOBS_CALLBACK_SECRETS = {"acme": ACME_NEW}
    with pytest.raises(InvalidCallbackUrl, match="jobs without a tenant"):
        jobs.submit(kind="noop", input={}, owner=user, callback_url="https://example.com/")
    response = submit(
        token_client(user),
        {"kind": "noop", "input": {}, "callback_url": "https://example.com/h"},
    )
    assert response.status_code == 400
    assert "callback_url" in response.json()["error"]["details"]
    assert Job.objects.count() == 0


BAD_URLS = [
    "ftp://example.com/hook",
    "https://user:pw@example.com/hook",
    "https://127.0.0.1/hook",
    "https://10.0.0.1/hook",
    "https://169.254.169.254/latest/meta-data",
    "https://[::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://[fe80::1]/hook",
    "https://224.0.0.1/hook",
    "https://0.0.0.0/hook",
    "https://example.com/hook#fragment",
    "https://exa mple.com/",
    "https:///no-host",
    "https://example.com:99999/",
    "https://bad_host!/",
    "https://example.com/\u00e9",
    "https://example.com/" + "a" * 2100,
    "",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_api_refuses_a_bad_callback_url__400_naming_the_field(
    user: Any, settings: Any, url: str
) -> None:
    settings.JOBS_CALLBACK_ALLOW_HTTP = False
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = []
    response = submit(token_client(user), {"kind": "noop", "input": {}, "callback_url": url})
    assert response.status_code == 400, response.content
    assert error_code(response) == "invalid"
    assert "callback_url" in response.json()["error"]["details"]
    assert Job.objects.count() == 0


@pytest.mark.parametrize("value", [123, ["https://example.com/"], {"url": "x"}, True])
def test_api_refuses_a_callback_url_that_is_not_a_string(user: Any, value: Any) -> None:
    response = submit(token_client(user), {"kind": "noop", "input": {}, "callback_url": value})
    assert response.status_code == 400
    assert "callback_url" in response.json()["error"]["details"]


def test_api_accepts_an_https_callback_url__and_shows_it(user: Any, settings: Any) -> None:
    settings.JOBS_CALLBACK_ALLOW_HTTP = False
    client = token_client(user)
    response = submit(
        client, {"kind": "noop", "input": {}, "callback_url": "https://hooks.example.com/j"}
    )
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    shown = client.get(f"/api/jobs/{job_id}/").json()["callback"]
    assert shown == {"url": "https://hooks.example.com/j", "delivery": None}
    assert client.get("/api/jobs/").json()["results"][0]["callback"] == shown


def test_the_same_idempotency_key_with_another_callback_url__409(user: Any) -> None:
    client = token_client(user)
    body = {"kind": "noop", "input": {}, "callback_url": "https://a.example.com/"}
    assert submit(client, body, key="k1").status_code == 202
    assert submit(client, body, key="k1").status_code == 202
    other = {**body, "callback_url": "https://b.example.com/"}
    assert submit(client, other, key="k1").status_code == 409


def test_submit_many__keeps_each_callback_url(user: Any) -> None:
    made = jobs.submit_many(
        [
            {"kind": "noop", "input": {}, "owner": user, "callback_url": "https://a.example.com/"},
            {"kind": "noop", "input": {}, "owner": user},
        ]
    )
    assert [Job.objects.get(pk=j.pk).callback_url for j in made] == [
        "https://a.example.com/",
        None,
    ]


def test_the_trigger_runs_only_for_jobs_with_a_callback_url() -> None:
    """Its WHEN clause tests callback_url first: a job without one never calls the function."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'jobs_job_callback'"
        )
        [(definition,)] = cursor.fetchall()
    assert "AFTER UPDATE OF state ON" in definition
    assert "WHEN (((new.callback_url IS NOT NULL)" in definition


def test_admin_ops_and_metrics_show_deliveries(user: Any, admin_client: Any) -> None:
    with callback_receiver(script=[404, 500]) as receiver:
        failed = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        jobs.execute(failed.pk)
        callbacks_send_due()  # 404: failed at once
        pending = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        jobs.execute(pending.pk)
        callbacks_send_due()  # 500: pending, backing off
    failed_id, pending_id = f"job-{failed.pk}-succeeded", f"job-{pending.pk}-succeeded"

    page = admin_client.get(f"/admin/jobs/job/{failed.pk}/change/").content.decode()
    assert failed_id in page and "callback delivery" in page
    delivery = CallbackDelivery.objects.get(webhook_id=failed_id)
    page = admin_client.get(f"/admin/jobs/callbackdelivery/{delivery.pk}/change/").content
    assert b"404" in page
    ops = admin_client.get("/ops/").content.decode()
    assert 'id="callbacks-pending">1<' in ops and 'id="callbacks-failed">1<' in ops
    assert failed_id in ops and pending_id in ops
    metrics = admin_client.get("/metrics").content.decode()
    assert 'jobs_callback_deliveries_total{outcome="failed"} 1.0' in metrics
    assert 'jobs_callback_deliveries_total{outcome="delivered"} 0.0' in metrics
    assert "jobs_callback_pending 1.0" in metrics
    assert SECRET not in page.decode() + ops + metrics


def test_replay_with_corrected_input__old_job_failed__replacement_keeps_the_url(
    user: Any,
) -> None:
    from jobs.quarantine import quarantine_replay

    url = "http://127.0.0.1:9/hook"
    job = jobs.submit(
        kind="drill.malformed", input={"document_id": "x"}, owner=user, callback_url=url
    )
    jobs.execute(job.pk)
    done = quarantine_replay(
        record_id=job.quarantines.get().pk,
        actor="carol",
        note="fixed the id",
        corrected_input={"document_id": 7},
    )
    [delivery] = deliveries(job)
    assert delivery.event == "failed"
    assert done.replacement_id is not None
    assert Job.objects.get(pk=done.replacement_id).callback_url == url
