"""The redelivery check against real servers: a lost message is published again within its
delivery deadline and runs on a real worker; an honest backlog is left alone until its own."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections
from django.db.models.functions import Now
from django.utils import timezone

import jobs
from jobs.counters import REDELIVERED, counter_value
from jobs.models import DrainSample, Job, JobEvent, WorkerHeartbeat
from jobs.ops.redeliver import LOCK_KEY, redeliver_run
from outbox.models import OutboxEntry
from tests.harness import Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _submit(user: Any, count: int, tag: str) -> list[Job]:
    return jobs.submit_many(
        [{"kind": "noop", "input": {"tag": tag, "n": n}, "owner": user} for n in range(count)]
    )


def _published_without_a_message(job_ids: list[Any], *, at: datetime | None = None) -> None:
    """The outbox says "published" while no message exists: what a broker loss leaves."""
    rows = OutboxEntry.objects.filter(job_id__in=job_ids)
    if at is None:
        rows.update(published_at=Now())
    else:
        rows.update(created_at=at, available_at=at, published_at=at)


def _a_live_worker() -> None:
    WorkerHeartbeat.objects.create(
        name="w@test", hostname="test", pid=1, started_at=timezone.now(), seen_at=timezone.now()
    )


def _history(*, since: float, wait: float) -> None:
    """Drain samples every 2 s from `since` seconds ago: what earlier checks measured."""
    now = timezone.now()
    DrainSample.objects.bulk_create(
        DrainSample(
            taken_at=now - timedelta(seconds=ago), backlog=0, drain_rate=0.0, wait_seconds=wait
        )
        for ago in range(int(since), 0, -2)
    )


def _finished_in_the_last_minute(user: Any, count: int) -> None:
    done = Job.objects.filter(pk__in=[j.pk for j in _submit(user, count, "done")])
    now = timezone.now()
    _lease(done)  # the transition guard: queued -> leased -> succeeded
    done.update(state="succeeded", result={}, finished_at=now - timedelta(seconds=30))


def _lease(rows: Any) -> None:
    rows.update(
        state="leased",
        generation=1,
        attempt=1,
        lease_owner="w@test",
        lease_until=timezone.now() + timedelta(minutes=5),
    )


def test_redeliver_publishes_a_lost_message_again__within_the_minimum_deadline_and_it_runs(
    harness: Harness, user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    settings.JOBS_DELIVERY_DEADLINE_MIN = 2.0
    harness.start_worker("w-redeliver", JOBS_WORKER_HEARTBEAT_INTERVAL="1")
    wait_until(WorkerHeartbeat.objects.exists, timeout=30, what="the worker's heartbeat row")
    job = jobs.submit(kind="noop", input={"lost": True}, owner=user)
    _published_without_a_message([job.pk])
    published = time.monotonic()

    first = redeliver_run()
    assert first.ran and first.redelivered == []  # published just now: not late yet
    wait_until(
        lambda: redeliver_run().redelivered,
        timeout=10,
        interval=0.2,
        what="the check to publish the job again",
    )
    took = time.monotonic() - published

    assert 2.0 <= took < 4.0, f"republished {took:.1f}s after the lost publish (deadline 2 s)"
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=30, what="the job to run"
    )
    done = Job.objects.get(pk=job.pk)
    assert done.generation == 1  # ran once
    assert counter_value(REDELIVERED) == 1
    assert JobEvent.objects.filter(job=job, actor="redeliverer").count() == 1
    assert OutboxEntry.objects.filter(job_id=job.pk).count() == 2
    assert redeliver_run().redelivered == []  # finished: nothing more to do


def test_redeliver_leaves_an_honest_backlog__until_its_derived_deadline(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    _a_live_worker()
    _finished_in_the_last_minute(user, 60)  # 1 completion per second
    _lease(Job.objects.filter(pk=_submit(user, 1, "busy")[0].pk))
    backlog = _submit(user, 100, "waiting")
    ids = [j.pk for j in backlog]
    ago = timezone.now() - timedelta(seconds=150)
    Job.objects.filter(pk__in=ids).update(next_attempt_at=ago, created_at=ago)
    _published_without_a_message(ids, at=ago)
    _history(since=160, wait=100.0)  # the drain time every check measured meanwhile

    # 100 waiting at 1/s: a 100 s drain, a 200 s deadline; 150 s is honest waiting.
    run = redeliver_run()
    assert run.backlog == 100 and run.wait == pytest.approx(100.0, rel=0.1)
    assert run.redelivered == [] and run.examined == 0

    # Ten times the rate now, and 10 s of backlog: still not lost, for these messages joined
    # a 100 s drain (the tail of a drain is not republished wholesale).
    _finished_in_the_last_minute(user, 540)
    run = redeliver_run()
    assert run.wait == pytest.approx(10.0, rel=0.1)
    assert run.examined == 100 and run.redelivered == []

    # Had the drain been 10 s all along, 150 s is 130 s past the deadline: lost.
    DrainSample.objects.all().delete()
    _history(since=160, wait=10.0)
    run = redeliver_run()
    assert sorted(run.redelivered) == sorted(str(pk) for pk in ids)
    assert redeliver_run().redelivered == []  # republished just now


def test_redeliver_leaves_every_due_job__when_no_worker_is_live(user: Any, settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False
    job = _submit(user, 1, "nobody")[0]
    _published_without_a_message([job.pk], at=timezone.now() - timedelta(hours=1))

    run = redeliver_run()

    assert run.ran and run.redelivered == []


def test_redeliver_runs_once_at_a_time__second_beat_returns_at_once(user: Any) -> None:
    held, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [LOCK_KEY])
            held.set()
            release.wait(10)
            cursor.execute("COMMIT")
        connections.close_all()

    other = threading.Thread(target=hold_the_lock)
    other.start()
    try:
        assert held.wait(10)
        assert redeliver_run().ran is False
    finally:
        release.set()
        other.join(10)
    assert redeliver_run().ran is True


def test_redeliver_looks_at_every_due_job__window_resumes_past_undeliverable_ones(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    _a_live_worker()
    hour_ago = timezone.now() - timedelta(hours=1)
    # Ten jobs due longest, each just sent again (say, their queue has no consumer): each run's
    # window of 4 x batch = 8 rows would be full of them if it did not resume.
    stuck = [j.pk for j in _submit(user, 10, "stuck")]
    Job.objects.filter(pk__in=stuck).update(next_attempt_at=hour_ago)
    _published_without_a_message(stuck, at=hour_ago)
    OutboxEntry.objects.filter(job_id__in=stuck).update(published_at=timezone.now())
    lost = [j.pk for j in _submit(user, 2, "lost")]
    Job.objects.filter(pk__in=lost).update(next_attempt_at=hour_ago + timedelta(seconds=1))
    _published_without_a_message(lost, at=hour_ago + timedelta(seconds=1))

    first, second = redeliver_run(batch=2), redeliver_run(batch=2)

    assert first.redelivered == [] and first.examined == 0
    assert sorted(second.redelivered) == sorted(str(pk) for pk in lost)
