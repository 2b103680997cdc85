"""The fast path's marks are batched per process (outbox/marks.py) and never lost silently."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import OperationalError

import jobs
from outbox import marks
from outbox.counters import RELAY_PUBLISHED, counter_value
from outbox.models import OutboxEntry
from tests.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _unmarked() -> int:
    return OutboxEntry.objects.filter(published_at__isnull=True).count()


def test_twenty_fast_path_submits__published_at_once_marked_by_one_thread_in_batches(
    user: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.OUTBOX_MARK_INTERVAL = 0.2
    real = marks.outbox_mark_published
    batches: list[tuple[str, int]] = []

    def counting(ids: list[int]) -> int:
        batches.append((threading.current_thread().name, len(ids)))
        return real(ids)

    monkeypatch.setattr(marks, "outbox_mark_published", counting)
    before = counter_value(RELAY_PUBLISHED)

    for n in range(20):
        jobs.submit(kind="noop", input={"n": n}, owner=user)

    wait_until(lambda: _unmarked() == 0, timeout=10, what="the mark thread to mark all 20")
    assert counter_value(RELAY_PUBLISHED) == before + 20
    assert OutboxEntry.objects.filter(reserved_until__isnull=False).count() == 0
    assert sum(n for _, n in batches) == 20
    assert len(batches) < 20  # batched: one round trip and commit for several jobs
    assert {name for name, _ in batches} == {"outbox-marks"}


def test_interval_zero__marks_in_the_callers_thread_at_once(user: Any, settings: Any) -> None:
    settings.OUTBOX_MARK_INTERVAL = 0
    job = jobs.submit(kind="noop", input={}, owner=user)

    assert OutboxEntry.objects.get(job_id=job.pk).published_at is not None


def test_a_failing_mark_is_kept_and_marked_once_the_database_answers(
    user: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.OUTBOX_MARK_INTERVAL = 3600  # the thread stays out of the way: we flush by hand
    marks.stop()
    real = marks.outbox_mark_published
    calls: list[list[int]] = []

    def down_then_up(ids: list[int]) -> int:
        calls.append(list(ids))
        if len(calls) == 1:
            raise OperationalError("the database went away")
        return real(ids)

    monkeypatch.setattr(marks, "outbox_mark_published", down_then_up)
    try:
        job = jobs.submit(kind="noop", input={}, owner=user)
        entry = OutboxEntry.objects.get(job_id=job.pk)

        assert marks.flush() == 0  # failed: kept, not dropped
        assert OutboxEntry.objects.get(pk=entry.pk).published_at is None
        assert marks.flush() == 1
        assert OutboxEntry.objects.get(pk=entry.pk).published_at is not None
        assert calls == [[entry.pk], [entry.pk]]
    finally:
        marks.stop()  # the thread started by this submit must not outlive the long interval
