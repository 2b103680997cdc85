"""Heartbeats run on one thread per process and keep a lease alive past its length."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import jobs
from jobs.claims import job_claim
from jobs.counters import STALE_WRITES_REJECTED, counter_value
from jobs.leases import Heartbeat
from jobs.models import Job
from tests.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _lease_until(job_id: Any) -> Any:
    return Job.objects.values_list("lease_until", flat=True).get(pk=job_id)


def test_lease_outlives_its_length_while_beating__then_stops_moving_after_stop(
    user: Any,
) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    lease = job_claim(Job.objects.get(pk=job.pk), worker="w:1:1", lease_seconds=0.3)
    assert lease is not None
    lost = threading.Event()
    heartbeat = Heartbeat(lease, on_lost=lost.set, on_cancel=lambda: None)
    heartbeat.start()
    first = _lease_until(job.pk)
    # Three lease lengths later the lease has been extended, not expired.
    wait_until(lambda: _lease_until(job.pk) > first, timeout=5, what="a heartbeat")
    time.sleep(0.9)
    assert _lease_until(job.pk) > first
    assert not lost.is_set()
    heartbeat.stop()
    stopped_at = _lease_until(job.pk)
    time.sleep(0.4)  # more than one interval (0.1 s): no beat after stop() returned
    assert _lease_until(job.pk) == stopped_at


def test_two_leases_beat_on_one_thread__a_lost_one_is_reported_once(user: Any) -> None:
    a = jobs.submit(kind="noop", input={"n": 1}, owner=user)
    b = jobs.submit(kind="noop", input={"n": 2}, owner=user)
    lease_a = job_claim(Job.objects.get(pk=a.pk), worker="w:a:1", lease_seconds=0.3)
    lease_b = job_claim(Job.objects.get(pk=b.pk), worker="w:b:1", lease_seconds=0.3)
    assert lease_a is not None and lease_b is not None
    lost_a, lost_b = threading.Event(), threading.Event()
    beats = [
        Heartbeat(lease_a, on_lost=lost_a.set, on_cancel=lambda: None),
        Heartbeat(lease_b, on_lost=lost_b.set, on_cancel=lambda: None),
    ]
    threads_before = threading.active_count()
    for heartbeat in beats:
        heartbeat.start()
    assert threading.active_count() <= max(threads_before, 1) + 1
    stale_before = counter_value(STALE_WRITES_REJECTED)
    # Another owner takes job a over: its next beat finds the fence gone.
    Job.objects.filter(pk=a.pk).update(lease_owner="someone-else")
    wait_until(lost_a.is_set, timeout=5, what="the lost lease to be noticed")
    b_until = _lease_until(b.pk)
    wait_until(lambda: _lease_until(b.pk) > b_until, timeout=5, what="b to keep beating")
    for heartbeat in beats:
        heartbeat.stop()
    assert not lost_b.is_set()
    assert counter_value(STALE_WRITES_REJECTED) == stale_before + 1


def test_a_failing_lost_callback_does_not_stop_other_leases_beats(user: Any) -> None:
    a = jobs.submit(kind="noop", input={"n": 3}, owner=user)
    b = jobs.submit(kind="noop", input={"n": 4}, owner=user)
    lease_a = job_claim(Job.objects.get(pk=a.pk), worker="w:a:2", lease_seconds=0.3)
    lease_b = job_claim(Job.objects.get(pk=b.pk), worker="w:b:2", lease_seconds=0.3)
    assert lease_a is not None and lease_b is not None

    def explode() -> None:
        raise RuntimeError("a callback that fails")

    failing = Heartbeat(lease_a, on_lost=explode, on_cancel=lambda: None)
    healthy = Heartbeat(lease_b, on_lost=lambda: None, on_cancel=lambda: None)
    failing.start()
    healthy.start()
    Job.objects.filter(pk=a.pk).update(lease_owner="someone-else")  # a's next beat: lost
    time.sleep(0.5)  # several intervals: a's lost beat has run (and raised) by now
    b_until = _lease_until(b.pk)
    wait_until(lambda: _lease_until(b.pk) > b_until, timeout=5, what="b to keep beating")
    failing.stop()
    healthy.stop()


def test_a_short_lease_added_while_the_thread_sleeps_for_a_long_one_beats_on_time(
    user: Any,
) -> None:
    """Registering wakes the thread only when it would sleep past the new lease's first
    beat: here it sleeps towards a 60 s lease's beat (20 s away) when a 0.3 s lease arrives."""
    slow = jobs.submit(kind="noop", input={"n": 5}, owner=user)
    fast = jobs.submit(kind="noop", input={"n": 6}, owner=user)
    lease_slow = job_claim(Job.objects.get(pk=slow.pk), worker="w:s:1", lease_seconds=60)
    lease_fast = job_claim(Job.objects.get(pk=fast.pk), worker="w:f:1", lease_seconds=0.3)
    assert lease_slow is not None and lease_fast is not None
    long_beat = Heartbeat(lease_slow, on_lost=lambda: None, on_cancel=lambda: None)
    short_beat = Heartbeat(lease_fast, on_lost=lambda: None, on_cancel=lambda: None)
    long_beat.start()
    time.sleep(0.2)  # let the thread go to sleep until the slow lease's first beat
    first = _lease_until(fast.pk)
    short_beat.start()
    try:
        # Without the wake-up the first beat would come ~20 s later; the lease would expire.
        wait_until(lambda: _lease_until(fast.pk) > first, timeout=2, what="the short lease's beat")
    finally:
        short_beat.stop()
        long_beat.stop()
