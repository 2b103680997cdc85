"""outbox.breaker.Breaker: the pause after a broker failure, doubled per failed probe up to
PAUSE_MAX, ended by the first publish that goes through."""

from __future__ import annotations

from outbox import breaker as module
from outbox.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failure_pauses__then_probing_until_a_success() -> None:
    clock = Clock()
    b = Breaker(clock)
    assert not b.paused() and not b.probing()
    b.failed("ConnectionRefusedError")
    assert b.paused() and b.probing()
    clock.now += module.PAUSE_FIRST
    assert not b.paused() and b.probing()  # the next row probes, in the publisher thread
    b.succeeded()
    assert not b.paused() and not b.probing()


def test_each_failed_probe_doubles_the_pause_up_to_the_max() -> None:
    clock = Clock()
    b = Breaker(clock)
    pauses = []
    for _ in range(8):
        b.failed("TimeoutError")
        pauses.append(b.until - clock.now)
        clock.now = b.until
    assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0, 16.0]
    assert module.PAUSE_FIRST == 1.0 and module.PAUSE_MAX == 16.0
    b.failed("TimeoutError")
    b.succeeded()
    b.failed("TimeoutError")  # after a success the next outage starts from the first pause
    assert b.until - clock.now == module.PAUSE_FIRST


def test_a_success_while_unpaused_changes_nothing() -> None:
    clock = Clock()
    b = Breaker(clock)
    b.succeeded()
    assert (b.pause, b.until) == (0.0, 0.0)
