"""jobs.worker_timers on kombu's own Hub and Timer: the time limits of tasks that ended in
time leave the heap, and every live entry still fires, once, in order."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kombu.asynchronous import Hub
from kombu.asynchronous.timer import Timer

from jobs import worker_timers
from jobs.worker_timers import COMPACT_MIN, timer_compact, timer_keep_compact

SOFT_LIMIT = 840.0  # jobs.execute's: how long a cancelled entry used to stay


def _time_limits_of_finished_tasks(call_later: Callable[..., Any], n: int) -> None:
    """What Celery's prefork pool does per task: a time-limit entry, cancelled when the task
    ends in time (celery.concurrency.asynpool: on_timeout_set, _discard_tref)."""
    for _ in range(n):
        call_later(SOFT_LIMIT, pytest.fail).cancel()


def test_cancelled_time_limits_leave_the_heap_and_live_entries_fire_once_in_order() -> None:
    timer = Timer()
    fired: list[int] = []
    _time_limits_of_finished_tasks(timer.call_after, 2 * COMPACT_MIN)
    for n in (3, 1, 2):  # live entries, due soon, entered out of order
        timer.call_after(0.001 * n, fired.append, (n,))
    timer.call_after(SOFT_LIMIT, pytest.fail)  # a running task's limit stays

    assert timer_compact(timer) == 2 * COMPACT_MIN
    assert len(timer) == 4
    time.sleep(0.01)  # all three short entries are due
    for _ in range(5):
        _, entry = next(iter(timer))
        if entry is None:
            break
        entry()
    assert fired == [1, 2, 3]
    assert len(timer) == 1


def test_a_small_heap_is_left_alone() -> None:
    timer = Timer()
    _time_limits_of_finished_tasks(timer.call_after, COMPACT_MIN - 1)
    assert timer_compact(timer) == 0
    assert len(timer) == COMPACT_MIN - 1


def test_a_worker_hub_compacts_its_timer_again_and_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_timers, "COMPACT_INTERVAL", 0.005)
    hub = Hub()
    timer_keep_compact(SimpleNamespace(hub=hub))
    for _ in range(2):
        _time_limits_of_finished_tasks(hub.call_later, 3 * COMPACT_MIN)
        assert len(hub.timer) == 3 * COMPACT_MIN + 1
        time.sleep(0.02)  # the compaction entry is due
        hub.fire_timers(max_timers=1, propagate=(Exception,))
        assert len(hub.timer) == 1  # the compaction's own next run


def test_a_worker_without_an_event_loop_is_left_as_it_is() -> None:
    timer_keep_compact(SimpleNamespace(hub=None))  # solo and threads pools: nothing to do


def test_a_timer_without_the_heap_we_know_is_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="jobs.worker_timers"):
        timer_keep_compact(SimpleNamespace(hub=SimpleNamespace(timer=object())))
    assert "cancelled time limits stay until due" in caplog.text
