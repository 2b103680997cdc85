"""The delivery deadline as pure functions (jobs.ops.redeliver): drain time, history, backoff."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from jobs.ops.redeliver import DeadlineRule, DrainHistory, delivery_deadline, drain_wait

RULE = DeadlineRule(minimum=5.0, factor=2.0, maximum=300.0)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_drain_wait__is_backlog_over_rate() -> None:
    assert drain_wait(backlog=1000, rate=100.0, busy=True) == 10.0


def test_drain_wait__is_zero_without_backlog_or_when_idle() -> None:
    assert drain_wait(backlog=0, rate=0.0, busy=True) == 0.0
    assert drain_wait(backlog=3, rate=0.0, busy=False) == 0.0


def test_drain_wait__is_infinite_when_busy_workers_complete_nothing() -> None:
    assert drain_wait(backlog=3, rate=0.0, busy=True) == math.inf


def test_deadline__is_the_minimum_for_a_short_backlog() -> None:
    assert delivery_deadline(wait=0.5, republished=0, rule=RULE) == 5.0


def test_deadline__is_factor_times_the_drain_time_for_a_long_backlog() -> None:
    assert delivery_deadline(wait=40.0, republished=0, rule=RULE) == 80.0


def test_deadline__is_capped_also_when_the_drain_time_is_unknown() -> None:
    assert delivery_deadline(wait=1e6, republished=0, rule=RULE) == 300.0
    assert delivery_deadline(wait=math.inf, republished=0, rule=RULE) == 300.0


def test_deadline__doubles_for_each_republish_up_to_the_cap() -> None:
    waits = [delivery_deadline(wait=0.0, republished=n, rule=RULE) for n in range(8)]

    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert delivery_deadline(wait=0.0, republished=10_000, rule=RULE) == 300.0


def test_wait_since__takes_the_largest_sample_since_the_publish__tail_of_a_drain() -> None:
    # 10,000 jobs at t=0 drained at 100/s: the backlog, and so the drain time, shrinks, but a
    # message published at t=0 keeps the deadline of the drain it joined.
    samples = [(_at(t), (10_000 - 100 * t) / 100) for t in range(0, 100, 2)]

    wait = DrainHistory(samples).wait_since(_at(0.1), slack=4.0)

    assert wait == 100.0
    assert delivery_deadline(wait=wait, republished=0, rule=RULE) == 200.0
    # Samples up to `slack` before the publish count too (the check runs every few seconds).
    assert DrainHistory(samples).wait_since(_at(90.0), slack=4.0) == (10_000 - 100 * 86) / 100


def test_wait_since__is_infinite_when_history_does_not_reach_the_publish() -> None:
    samples = [(_at(t), 0.0) for t in range(100, 120, 2)]

    assert DrainHistory(samples).wait_since(_at(10.0), slack=4.0) == math.inf
    assert DrainHistory([]).wait_since(_at(10.0), slack=4.0) == math.inf
    assert DrainHistory(samples).wait_since(_at(99.0), slack=4.0) == 0.0
