"""Acceptance follows persistence: job, event and outbox row commit together or not at all."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from django.db import connection, transaction

import jobs
from jobs.exceptions import IdempotencyConflict
from jobs.models import Job, JobEvent
from outbox import marks
from outbox.models import OutboxEntry
from tests.harness import Harness, queue_length

pytestmark = pytest.mark.django_db(transaction=True)


class CallerFailure(Exception):
    """The caller's own work failed after it submitted the job."""


def broker_queue_length(harness: Harness, queue: str = "jobs") -> int:
    client = redis.Redis.from_url(harness.broker_url)
    try:
        return queue_length(client, queue)
    finally:
        client.close()


def test_submit_in_rolled_back_transaction__leaves_no_job_no_outbox_row_no_message(
    harness: Harness, user: Any
) -> None:
    with pytest.raises(CallerFailure), transaction.atomic():
        jobs.submit(kind="noop", input={"n": 1}, owner=user, idempotency_key="rollback-1")
        raise CallerFailure("the caller's transaction rolls back after submit")

    assert Job.objects.count() == 0
    assert JobEvent.objects.count() == 0
    assert OutboxEntry.objects.count() == 0
    assert broker_queue_length(harness) == 0


def test_submit_in_committed_transaction__publishes_one_message_after_commit(
    harness: Harness, user: Any
) -> None:
    with transaction.atomic():
        job = jobs.submit(kind="noop", input={"n": 1}, owner=user)
        # Nothing may reach the broker before the caller's commit.
        assert broker_queue_length(harness) == 0

    assert broker_queue_length(harness) == 1
    marks.flush()  # the fast path's mark is batched (outbox/marks.py)
    entry = OutboxEntry.objects.get(job_id=job.pk)
    assert entry.published_at is not None
    assert list(JobEvent.objects.filter(job=job).values_list("to_state", flat=True)) == ["queued"]


def test_submit_same_idempotency_key_from_20_threads__creates_one_job(user: Any) -> None:
    threads_count = 20
    barrier = threading.Barrier(threads_count)
    ids: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def submit_once() -> None:
        try:
            barrier.wait(timeout=30)
            job = jobs.submit(kind="noop", input={"doc": 7}, owner=user, idempotency_key="same")
            with lock:
                ids.append(str(job.pk))
        except BaseException as exc:  # collected and re-raised by the test thread
            with lock:
                errors.append(exc)
        finally:
            connection.close()  # each thread owns its connection

    threads = [threading.Thread(target=submit_once) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert len(ids) == threads_count
    assert len(set(ids)) == 1
    assert Job.objects.filter(owner=user, idempotency_key="same").count() == 1
    assert OutboxEntry.objects.filter(job_id=ids[0]).count() == 1
    assert JobEvent.objects.filter(job_id=ids[0]).count() == 1


def test_submit_same_business_key_from_20_threads__creates_one_logical_job(user: Any) -> None:
    threads_count = 20
    barrier = threading.Barrier(threads_count)
    ids: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def submit_once() -> None:
        try:
            barrier.wait(timeout=30)
            job = jobs.submit(kind="noop", input={"doc": 8}, owner=user, business_key="doc-8")
            with lock:
                ids.append(str(job.pk))
        except BaseException as exc:
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit_once) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert len(set(ids)) == 1
    assert Job.objects.filter(kind="noop", business_key="doc-8", input_version=1).count() == 1


def test_submit_same_key_same_body__returns_the_existing_job(user: Any) -> None:
    first = jobs.submit(kind="noop", input={"a": 1}, owner=user, idempotency_key="k1")
    again = jobs.submit(kind="noop", input={"a": 1}, owner=user, idempotency_key="k1")

    assert again.pk == first.pk
    assert first.replayed is False
    assert again.replayed is True
    assert Job.objects.count() == 1


def test_submit_same_key_different_body__raises_idempotency_conflict(user: Any) -> None:
    jobs.submit(kind="noop", input={"a": 1}, owner=user, idempotency_key="k1")

    with pytest.raises(IdempotencyConflict, match="different request body"):
        jobs.submit(kind="noop", input={"a": 2}, owner=user, idempotency_key="k1")
    assert Job.objects.count() == 1
    assert OutboxEntry.objects.count() == 1


def test_submit_same_key_different_body_concurrently__one_job_and_conflicts(user: Any) -> None:
    threads_count = 10
    barrier = threading.Barrier(threads_count)
    outcomes: list[str] = []
    lock = threading.Lock()

    def submit_once(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            jobs.submit(kind="noop", input={"n": n % 2}, owner=user, idempotency_key="racy")
            outcome = f"ok:{n % 2}"
        except IdempotencyConflict:
            outcome = "conflict"
        except BaseException as exc:
            outcome = f"error:{exc!r}"
        finally:
            connection.close()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=submit_once, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    job = Job.objects.get(owner=user, idempotency_key="racy")
    winner = f"ok:{job.input['n']}"
    assert not [o for o in outcomes if o.startswith("error")], outcomes
    # Every thread sent the winner's body got the job back; every other body got a conflict.
    assert outcomes.count(winner) == threads_count // 2
    assert outcomes.count("conflict") == threads_count // 2
    assert Job.objects.count() == 1


def test_submit_outside_a_transaction__one_statement_then_published_and_counted(
    harness: Harness, user: Any
) -> None:
    from outbox.counters import RELAY_PUBLISHED, counter_value

    before = counter_value(RELAY_PUBLISHED)
    job = jobs.submit(kind="noop", input={"n": 2}, owner=user)

    assert broker_queue_length(harness) == 1
    marks.flush()
    entry = OutboxEntry.objects.get(job_id=job.pk)
    assert entry.published_at is not None and entry.reserved_until is None
    assert entry.kwargs == {
        "job_id": str(job.pk),
        "generation": 0,
        "kind": "noop",
        "kind_version": job.kind_version,
    }
    assert counter_value(RELAY_PUBLISHED) == before + 1
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.created_at) == ("queued", job.created_at)
