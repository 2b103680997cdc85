"""outbox.fastpath: alone, a thread publishes its own rows; with company, the leader packs."""

from __future__ import annotations

import threading
from typing import Any

from outbox import fastpath


def _rows(*ids: int) -> list[Any]:
    return [f"row-{i}" for i in ids]  # the combiner never looks inside a row


def test_alone__published_inline_in_the_callers_thread() -> None:
    calls: list[tuple[list[Any], str]] = []
    fastpath.publish_combined(
        _rows(1), lambda rows: calls.append((rows, threading.current_thread().name))
    )
    fastpath.publish_combined(
        _rows(2), lambda rows: calls.append((rows, threading.current_thread().name))
    )
    me = threading.current_thread().name
    assert calls == [(_rows(1), me), (_rows(2), me)]


def test_with_company__followers_return_at_once_and_the_leader_publishes_their_rows_together() -> (
    None
):
    in_flight = threading.Event()
    release = threading.Event()
    calls: list[list[Any]] = []

    def publish(rows: list[Any]) -> None:
        calls.append(rows)
        if len(calls) == 1:
            in_flight.set()
            assert release.wait(10)

    leader = threading.Thread(target=fastpath.publish_combined, args=(_rows(1), publish))
    leader.start()
    assert in_flight.wait(10)
    # Three other threads commit while the leader's publish is in flight: none publishes.
    for i in (2, 3, 4):
        follower = threading.Thread(target=fastpath.publish_combined, args=(_rows(i), publish))
        follower.start()
        follower.join(10)
        assert not follower.is_alive()
    assert calls == [_rows(1)]
    release.set()
    leader.join(10)
    assert calls == [_rows(1), _rows(2, 3, 4)]
    # Leadership was given up: the next caller publishes inline again.
    fastpath.publish_combined(_rows(5), publish)
    assert calls[-1] == _rows(5)


def test_a_failing_publish_never_raises_and_never_keeps_the_leadership() -> None:
    def broken(rows: list[Any]) -> None:
        raise ConnectionError("broker away")

    fastpath.publish_combined(_rows(1), broken)
    calls: list[list[Any]] = []
    fastpath.publish_combined(_rows(2), calls.append)
    assert calls == [_rows(2)]


def test_a_leader_serves_at_most_max_rounds_then_hands_what_it_holds_out() -> None:
    calls: list[list[Any]] = []
    next_id = iter(range(100, 10_000))

    def publish(rows: list[Any]) -> None:
        calls.append(rows)
        # Someone always commits meanwhile (as a follower does: only while there is a
        # leader): without a cap this leader would never return.
        combiner = fastpath._combiner()
        with combiner.lock:
            if combiner.leading:
                combiner.pending.extend(_rows(next(next_id)))

    fastpath.publish_combined(_rows(1), publish)
    # Its own round, MAX_ROUNDS rounds for others, and one last round with what it held.
    assert len(calls) == fastpath.MAX_ROUNDS + 2
    assert not fastpath._combiner().leading
    assert fastpath._combiner().pending == []  # no row left without a publisher
    published = [row for rows in calls for row in rows]
    assert len(published) == len(set(published)) == fastpath.MAX_ROUNDS + 2
