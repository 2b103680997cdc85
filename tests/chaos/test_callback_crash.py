"""A real sender process killed mid-delivery: the delivery is sent again once its lease lapses,
with the same webhook id; the receiver may see it twice, never under two ids."""

from __future__ import annotations

import base64
import json
import signal
import sys
import threading
from typing import Any

import pytest

import jobs
from jobs.callbacks.signing import signature_verify
from jobs.models import CallbackAttempt, CallbackDelivery, Job
from tests.callback_receiver import Receiver, callback_receiver
from tests.harness import Harness, Proc, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

SECRET = "whsec_" + base64.b64encode(b"chaos-callback-secret-of-32bytes").decode()
TIMEOUT = 2.0  # an attempt's bound; the lease is this plus 5 s (jobs.callbacks.delivery)


@pytest.fixture(autouse=True)
def _callbacks_to_loopback(settings: Any) -> None:
    settings.JOBS_CALLBACK_SECRETS = {"": SECRET}
    settings.JOBS_CALLBACK_ALLOW_HTTP = True
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]


def start_sender(harness: Harness, **env: str) -> Proc:
    """`manage.py jobs_callbacks --loop`, a real sender, on the suite's database."""
    child_env = harness.base_env(
        JOBS_CALLBACK_SECRETS=json.dumps({"": SECRET}),
        JOBS_CALLBACK_ALLOW_HTTP="1",
        JOBS_CALLBACK_ALLOWED_NETWORKS="127.0.0.0/8",
        JOBS_CALLBACK_TIMEOUT=str(TIMEOUT),
        **env,
    )
    argv = [sys.executable, "manage.py", "jobs_callbacks", "--loop", "--interval=0.1"]
    return harness.spawn(f"callbacks-{len(harness.procs)}", argv, child_env)


def finished_job(user: Any, receiver: Receiver) -> tuple[Job, CallbackDelivery]:
    job = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
    jobs.execute(job.pk)
    return job, CallbackDelivery.objects.get(job=job)


def outcomes(delivery: CallbackDelivery) -> list[tuple[int, str]]:
    return list(CallbackAttempt.objects.filter(delivery=delivery).values_list("number", "outcome"))


def test_sender_sigkilled_while_the_receiver_holds_the_request__sent_again_same_id(
    harness: Harness, user: Any
) -> None:
    held = threading.Event()
    with callback_receiver(hold=held) as receiver:
        _, delivery = finished_job(user, receiver)
        sender = start_sender(harness)
        wait_until(receiver.requests, timeout=60, what="the first request, held")
        sender.signal(signal.SIGKILL)
        wait_until(lambda: not sender.alive(), timeout=10, what="the sender to die")
        held.set()
        delivery.refresh_from_db()
        assert delivery.status == "pending" and outcomes(delivery) == [(1, "sending")]

        start_sender(harness)  # takes it over once the dead sender's lease lapses
        wait_until(
            lambda: CallbackDelivery.objects.get(pk=delivery.pk).status == "delivered",
            timeout=60,
            what="the delivery to be made by the second sender",
        )
        requests = receiver.requests()
        assert [r.webhook_id for r in requests] == [delivery.webhook_id] * 2
        assert requests[0].body == requests[1].body
        for request in requests:
            assert signature_verify(SECRET, request.headers, request.body)
        assert outcomes(delivery) == [(1, "sending"), (2, "delivered")]
        assert requests[1].at - requests[0].at >= TIMEOUT  # not before the lease lapsed


def test_sender_killed_after_the_answer_before_its_record__sent_again_same_id(
    harness: Harness, user: Any
) -> None:
    """The crash window callbacks.after_send_before_record: the receiver answered 200, the
    sender died before writing it; the next sender repeats the request under the same id."""
    with callback_receiver() as receiver:
        _, delivery = finished_job(user, receiver)
        sender = start_sender(harness, JOBS_FAILPOINTS="callbacks.after_send_before_record=exit")
        wait_until(lambda: not sender.alive(), timeout=60, what="the failpoint's exit")
        assert len(receiver.requests()) == 1
        assert CallbackDelivery.objects.get(pk=delivery.pk).status == "pending"

        start_sender(harness)
        wait_until(
            lambda: CallbackDelivery.objects.get(pk=delivery.pk).status == "delivered",
            timeout=60,
            what="the delivery to be recorded",
        )
        assert receiver.ids() == [delivery.webhook_id] * 2
        assert outcomes(delivery) == [(1, "sending"), (2, "delivered")]
