"""The deployed loop: a real worker runs the job, a real beat sends the sender task to a real
maintenance worker, and the receiver gets the verified callback."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import pytest

import jobs
from jobs.callbacks.signing import signature_verify
from jobs.models import CallbackDelivery
from tests.callback_receiver import callback_receiver
from tests.harness import Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "whsec_" + base64.b64encode(b"beat-callback-secret-of-32-bytes").decode()


def test_beat_and_workers_deliver_a_callback(harness: Harness, user: Any, settings: Any) -> None:
    settings.JOBS_CALLBACK_SECRETS = {"": SECRET}
    settings.JOBS_CALLBACK_ALLOW_HTTP = True
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    env = {
        "JOBS_CALLBACK_SECRETS": json.dumps({"": SECRET}),
        "JOBS_CALLBACK_ALLOW_HTTP": "1",
        "JOBS_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "JOBS_CALLBACK_INTERVAL": "0.5",
        "OUTBOX_RELAY_INTERVAL": "0.5",
    }
    harness.start_worker("maint", queues="jobs.maintenance", env=env)
    harness.start_worker("w1", env=env)
    beat = [sys.executable, "-m", "celery", "-A", "jobsite", "beat", "--loglevel=INFO"]
    beat.append(f"--schedule={harness.workdir / 'beat-schedule'}")
    harness.spawn("beat", beat, harness.base_env(**env))
    with callback_receiver() as receiver:
        job = jobs.submit(kind="noop", input={}, owner=user, callback_url=receiver.url)
        wait_until(receiver.requests, timeout=90, what="the callback from beat's sender")
        [request] = receiver.requests()
        assert signature_verify(SECRET, request.headers, request.body) == f"job-{job.pk}-succeeded"
        wait_until(
            lambda: CallbackDelivery.objects.get(job=job).status == "delivered",
            timeout=30,
            what="the delivery recorded",
        )
