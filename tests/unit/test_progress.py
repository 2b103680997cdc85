"""ctx.progress's rules without a database: what a report may hold and how often one is written."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.exceptions import LeaseLost
from jobs.progress import (
    PROGRESS_INTERVAL_SECONDS,
    PROGRESS_MESSAGE_MAX_LENGTH,
    Progress,
    ProgressThrottle,
    progress_text,
    progress_value,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _throttle(clock: Clock) -> tuple[ProgressThrottle, list[Progress]]:
    written: list[Progress] = []
    return ProgressThrottle(written.append, clock=clock), written


def test_progress_value__done_total_and_message_kept() -> None:
    assert progress_value(3, 10, "rows") == Progress(done=3, total=10, message="rows")
    assert progress_value(0) == Progress(done=0, total=None, message="")
    assert progress_value(5, 5) == Progress(done=5, total=5, message="")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((1.5,), TypeError),
        (("3",), TypeError),
        ((True,), TypeError),
        ((None,), TypeError),
        ((1, 2.0), TypeError),
        ((1, 2, 3), TypeError),
        ((1, 2, None), TypeError),
        ((-1,), ValueError),
        ((1, -1), ValueError),
        ((11, 10), ValueError),
    ],
)
def test_progress_value__refused__bad_argument(
    args: tuple[Any, ...], error: type[Exception]
) -> None:
    with pytest.raises(error, match="progress"):
        progress_value(*args)


def test_progress_value__message_cut_to_its_bound_and_nul_dropped() -> None:
    value = progress_value(1, None, "a\x00b" + "x" * 1000)
    assert len(value.message) == PROGRESS_MESSAGE_MAX_LENGTH
    assert value.message.startswith("abx")


def test_throttle__first_report_written_at_once_then_one_per_interval() -> None:
    clock = Clock()
    throttle, written = _throttle(clock)
    throttle.report(progress_value(1))
    assert written == [progress_value(1)]
    for done in range(2, 100):
        clock.now += PROGRESS_INTERVAL_SECONDS / 100
        throttle.report(progress_value(done))
    assert written == [progress_value(1)]
    assert throttle.pending == progress_value(99)
    clock.now += PROGRESS_INTERVAL_SECONDS
    throttle.report(progress_value(100))
    assert written == [progress_value(1), progress_value(100)]
    assert throttle.pending is None


def test_throttle__tight_loop_writes_at_most_one_per_interval_of_its_clock() -> None:
    clock = Clock()
    throttle, written = _throttle(clock)
    start = clock.now
    for done in range(10_000):
        clock.now += 0.001
        throttle.report(progress_value(done))
    elapsed = clock.now - start
    assert len(written) <= 1 + elapsed / PROGRESS_INTERVAL_SECONDS
    assert len(written) >= elapsed / PROGRESS_INTERVAL_SECONDS - 1


def test_throttle__flush_writes_the_pending_value_once_and_nothing_when_none() -> None:
    clock = Clock()
    throttle, written = _throttle(clock)
    throttle.flush()
    assert written == []
    throttle.report(progress_value(1))
    throttle.report(progress_value(2, 9, "last"))
    throttle.flush()
    throttle.flush()
    assert written == [progress_value(1), progress_value(2, 9, "last")]


def test_throttle__same_value_again_not_written() -> None:
    clock = Clock()
    throttle, written = _throttle(clock)
    throttle.report(progress_value(4, 8))
    clock.now += 10 * PROGRESS_INTERVAL_SECONDS
    throttle.report(progress_value(4, 8))
    throttle.flush()
    assert written == [progress_value(4, 8)]


def test_throttle__refused_write_propagates_and_leaves_nothing_pending() -> None:
    def refuse(progress: Progress) -> None:
        raise LeaseLost("gone")

    throttle = ProgressThrottle(refuse, clock=Clock())
    with pytest.raises(LeaseLost):
        throttle.report(progress_value(1))
    assert throttle.pending is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        ({"done": 3, "total": 10, "message": "rows", "updated_at": "t"}, "3 / 10 (30%) rows"),
        ({"done": 7, "total": None, "message": "", "updated_at": "t"}, "7"),
        ({"done": 0, "total": 0, "message": "", "updated_at": "t"}, "0 / 0"),
        ({"unexpected": 1}, "-"),
    ],
)
def test_progress_text__for_people(value: Any, text: str) -> None:
    assert progress_text(value) == text
