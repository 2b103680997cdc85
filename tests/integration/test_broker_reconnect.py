"""A worker reconnects within seconds of its broker's return, however long the broker was gone
(outbox/reconnect.py): kombu's waits between attempts, 2 s growing to 30 s, are capped at
RECONNECT_MAX_SECONDS, and the worker gets as many attempts as fit in the time kombu's waits
gave the project's number (Celery's worker exits once they are used up)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from outbox.reconnect import RECONNECT_MAX_SECONDS
from tests.conftest import broker_back__worker_runs_a_job
from tests.harness import PrivateRedis, harness_for, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = re.compile(r"Trying again in ([\d.]+) seconds")


def test_a_worker_tries_again_every_few_seconds_as_long_as_kombus_waits_would_have_lasted(
    lossy_redis: PrivateRedis, user: Any
) -> None:
    with harness_for(lossy_redis.url) as harness:
        # 4 attempts: kombu waits 2, 4, 6, 8 s (20 s); capped, 10 attempts 2 s apart
        worker = harness.start_worker("patient", CELERY_BROKER_CONNECTION_MAX_RETRIES="4")
        lossy_redis.kill()
        try:
            wait_until(
                lambda: len(WAIT.findall(worker.log())) >= 4,
                timeout=60,
                what="four reconnection attempts",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{worker.log()[-4000:]}") from None
        waits = [float(w) for w in WAIT.findall(worker.log())]
        assert max(waits) <= RECONNECT_MAX_SECONDS, waits
        assert "(4/10)" in worker.log(), worker.log()[-3000:]  # attempts for the same 20 s
        assert worker.alive(), worker.log()[-3000:]
        broker_back__worker_runs_a_job(lossy_redis, worker, user)
