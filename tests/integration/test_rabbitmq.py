"""RabbitMQ is a supported broker: the same durable path end to end over AMQP."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

import jobs
from jobs.models import Job
from tests.conftest import point_celery_at
from tests.harness import Harness, PrivateRedis, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"


def _rabbitmq_up() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def rabbit_harness(harness: Harness, session_redis: PrivateRedis) -> Iterator[Harness]:
    assert _rabbitmq_up(), "RabbitMQ must run on 127.0.0.1:5672 (scripts/ensure-services.sh)"
    from jobsite.celery import app

    point_celery_at(AMQP_URL)
    with app.connection_for_write() as conn:
        # Start from an empty queue; the worker declares it again with Celery's arguments.
        conn.default_channel.queue_delete(queue="jobs")  # type: ignore[attr-defined]  # AMQP
    harness.broker_url = AMQP_URL
    try:
        yield harness
    finally:
        point_celery_at(session_redis.url)


def test_job_runs_over_rabbitmq__submit_relay_claim_complete(
    rabbit_harness: Harness, user: Any, settings: Any
) -> None:
    settings.OUTBOX_RESERVATION_SECONDS = 2  # a failed fast-path publish is relayed quickly
    rabbit_harness.start_worker("rabbit-w1")
    rabbit_harness.start_relay()
    submitted = [jobs.submit(kind="noop", input={"n": n}, owner=user).pk for n in range(5)]
    wait_until(
        lambda: Job.objects.filter(pk__in=submitted, state="succeeded").count() == 5,
        timeout=60,
        what="five jobs to succeed over AMQP",
    )
    assert set(Job.objects.filter(pk__in=submitted).values_list("generation", flat=True)) == {1}


def test_worker_refuses_time_limit_above_rabbitmq_consumer_timeout(rabbit_harness: Harness) -> None:
    proc = rabbit_harness.start_worker(
        "rabbit-unsafe", wait=False, JOBS_TASK_TIME_LIMIT="1700", JOBS_TASK_SOFT_TIME_LIMIT="1600"
    )
    wait_until(lambda: not proc.alive(), timeout=60, what="the unsafe worker to refuse to start")
    assert "not comfortably below the broker's redelivery window" in proc.log()
