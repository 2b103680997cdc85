"""Priorities in the broker (issue 27, part 1): each band's messages wait in a list of their
own (Redis) or carry the broker priority of their band (RabbitMQ, queues with
x-max-priority), so higher-priority work already in the broker is delivered first; a job the
redelivery check publishes again goes at the top (the aging that bounds a low band's wait).
docs/architecture.md, "Priorities"."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import jobs
import tests.kinds_priority  # noqa: F401  (registers the priority kinds in this process)
from jobs.models import Job, WorkerHeartbeat
from jobs.ops.redeliver import redeliver_run
from jobs.registry import PRIORITY_MAX
from jobs.states import JobState
from outbox.models import OutboxEntry
from outbox.transport import celery_app, task_sender
from tests.conftest import point_celery_at
from tests.harness import Harness, PrivateRedis, queue_keys, wait_until
from tests.kinds_priority import started_kinds

pytestmark = pytest.mark.django_db(transaction=True)

KWARGS = {"job_id": "0195f0f0-0000-7000-8000-000000000000", "generation": 0, "kind": "noop"}
PER_BAND = 30
# Messages a worker may hold before the order applies: prefetch 1 per pool process, plus the
# one the consumer is reading when the first arrives (concurrency 1 below).
IN_HAND = 2


def _tasks_in(client: Any, key: str) -> list[int]:
    """The `generation` of each message waiting in one Redis list, oldest first."""
    return [
        json.loads(base64.b64decode(json.loads(raw)["body"]))[1]["generation"]
        for raw in reversed(client.lrange(key, 0, -1))
    ]


def test_redis__each_band_in_its_own_list__popped_high_default_low(broker: Any) -> None:
    with task_sender(celery_app()) as send:
        for generation, priority in enumerate([-50, 0, 100, -1, 7, 0]):
            send("jobs.execute", {**KWARGS, "generation": generation}, "jobs", priority)

    high, default, low, _ = (_tasks_in(broker, key) for key in queue_keys("jobs"))
    assert (high, default, low) == ([2, 4], [1, 5], [0, 3])


def test_redis__broker_priorities_off__one_fifo(broker: Any, settings: Any) -> None:
    settings.OUTBOX_BROKER_PRIORITIES = False
    with task_sender(celery_app()) as send:
        for generation, priority in enumerate([-50, 0, 100]):
            send("jobs.execute", {**KWARGS, "generation": generation}, "jobs", priority)

    assert [_tasks_in(broker, key) for key in queue_keys("jobs")] == [[0, 1, 2], [], [], []]


def test_a_backlog_in_the_broker__a_real_worker_starts_high_then_default_then_low(
    harness: Harness, user: Any, calls_file: str
) -> None:
    """Low jobs reach the broker first, then default, then high (the fast path publishes
    each at its commit); a worker started afterwards runs them band by band."""
    for kind in ("prio.low", "prio.plain", "prio.high"):
        for n in range(PER_BAND):
            jobs.submit(kind=kind, input={"n": n}, owner=user)
    wait_until(
        lambda: not OutboxEntry.objects.filter(published_at__isnull=True).exists(),
        timeout=30,
        what="every job published",
    )
    harness.start_worker(
        "w-bands", concurrency=1, env={"JOBS_HANDLER_MODULES": "tests.kinds_priority"}
    )
    wait_until(
        lambda: Job.objects.filter(state=JobState.SUCCEEDED.value).count() == 3 * PER_BAND,
        timeout=120,
        what="every job to run",
    )

    starts = started_kinds(calls_file)
    assert len(starts) == 3 * PER_BAND
    first, middle, last = (starts[i * PER_BAND : (i + 1) * PER_BAND] for i in range(3))
    assert first.count("prio.high") >= PER_BAND - IN_HAND, starts
    assert middle.count("prio.plain") >= PER_BAND - 2 * IN_HAND, starts
    assert last.count("prio.low") >= PER_BAND - IN_HAND, starts


def test_a_job_published_again_by_the_redelivery_check__goes_at_the_top_priority(
    user: Any, settings: Any
) -> None:
    """Aging: a low job that waited past its delivery deadline (lost, or kept back by higher
    bands) gets a message at PRIORITY_MAX, which the relay and the broker put first."""
    settings.OUTBOX_FAST_PATH = False
    settings.JOBS_DELIVERY_DEADLINE_MIN = 1.0
    WorkerHeartbeat.objects.create(
        name="w@test", hostname="test", pid=1, started_at=timezone.now(), seen_at=timezone.now()
    )
    job = jobs.submit(kind="prio.low", input={}, owner=user)
    past = timezone.now() - timedelta(seconds=30)
    Job.objects.filter(pk=job.pk).update(next_attempt_at=past)  # due, and published, 30 s ago
    OutboxEntry.objects.filter(job_id=job.pk).update(
        created_at=past, available_at=past, published_at=past
    )

    assert redeliver_run().redelivered == [str(job.pk)]

    rows = OutboxEntry.objects.filter(job_id=job.pk).order_by("id")
    assert list(rows.values_list("priority", flat=True)) == [-100, PRIORITY_MAX]


@pytest.fixture
def priority_queue(session_redis: PrivateRedis) -> Iterator[str]:
    """The in-process app pointed at RabbitMQ, with queues declared with x-max-priority 10
    (CELERY_TASK_QUEUE_MAX_PRIORITY), and a queue of this test's own there."""
    from tests.integration.test_rabbitmq import AMQP_URL, _rabbitmq_up

    assert _rabbitmq_up(), "RabbitMQ must run on 127.0.0.1:5672 (scripts/ensure-services.sh)"
    queue = f"prio-{uuid.uuid4().hex[:8]}"
    point_celery_at(AMQP_URL)
    queues: Any = celery_app().amqp.queues  # celery-types lacks Queues.max_priority
    before = queues.max_priority
    queues.max_priority = 10
    try:
        yield queue
    finally:
        queues.max_priority = before
        queues.pop(queue, None)
        with celery_app().connection_for_write() as conn:
            conn.default_channel.queue_delete(queue=queue)  # type: ignore[attr-defined]
        point_celery_at(session_redis.url)


def test_rabbitmq__a_priority_queue_delivers_high_then_default_then_low(
    priority_queue: str,
) -> None:
    app = celery_app()
    with task_sender(app) as send:
        for generation, priority in enumerate([-50, 0, 100, -1, 7, 0]):
            send("jobs.execute", {**KWARGS, "generation": generation}, priority_queue, priority)

    received = []
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(priority_queue, no_ack=True)) is not None:  # type: ignore[attr-defined]
            received.append(json.loads(message.body)[1]["generation"])
    assert received == [2, 4, 1, 5, 0, 3]
