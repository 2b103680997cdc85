"""outbox.fastpath: alone, a thread publishes its own rows; with company, the publisher packs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from outbox import fastpath


def _rows(*ids: int) -> list[Any]:
    return [f"row-{i}" for i in ids]  # the publisher never looks inside a row


@pytest.fixture(autouse=True)
def fresh_publisher() -> Iterator[None]:
    fastpath.stop()  # a publisher an earlier test left ends with its connection, not orphaned
    fastpath._publisher.forget()
    yield
    assert fastpath.flush(10), "rows left in hand after the test"
    fastpath._publisher.forget()


class Recorder:
    """A publish function that notes what it got, in which thread, and wakes waiters."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Any], str]] = []
        self.cond = threading.Condition()

    def __call__(self, rows: list[Any]) -> None:
        with self.cond:
            self.calls.append((list(rows), threading.current_thread().name))
            self.cond.notify_all()

    def wait_for(self, n: int, timeout: float = 10.0) -> list[tuple[list[Any], str]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.calls) >= n, timeout), self.calls
            return list(self.calls)


class OtherWriter:
    """Another thread inside `writing()` (as one inside jobs.submit is) until released."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with fastpath.writing():
            self.inside.set()
            assert self.release.wait(30)

    def __enter__(self) -> OtherWriter:
        self.thread.start()
        assert self.inside.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(10)


def test_alone__published_inline_in_the_callers_thread() -> None:
    publish = Recorder()
    fastpath.publish_combined(_rows(1), publish)
    fastpath.publish_combined(_rows(2), publish)
    me = threading.current_thread().name
    assert publish.calls == [(_rows(1), me), (_rows(2), me)]


def test_the_callers_own_writing_block_is_not_company() -> None:
    publish = Recorder()
    with fastpath.writing(), fastpath.writing():  # nested blocks count once
        fastpath.publish_combined(_rows(1), publish)
    assert publish.calls == [(_rows(1), threading.current_thread().name)]
    assert fastpath._publisher().writers == 0


@override_settings(OUTBOX_LINGER_SECONDS=60.0)
def test_with_another_writer__rows_wait_and_leave_together_once_it_is_done() -> None:
    publish = Recorder()
    with OtherWriter():
        fastpath.publish_combined(_rows(1), publish)  # returns at once: not published here
        fastpath.publish_combined(_rows(2, 3), publish)
        assert publish.calls == []
    calls = publish.wait_for(1)
    assert calls == [(_rows(1, 2, 3), "outbox-publisher")]


@override_settings(OUTBOX_LINGER_SECONDS=0.2)
def test_company_that_never_leaves__rows_wait_at_most_the_linger() -> None:
    publish = Recorder()
    with OtherWriter():
        handed = time.monotonic()
        fastpath.publish_combined(_rows(1), publish)
        calls = publish.wait_for(1)
        waited = time.monotonic() - handed
    assert calls == [(_rows(1), "outbox-publisher")]
    assert waited >= 0.2


@override_settings(OUTBOX_LINGER_SECONDS=60.0, OUTBOX_BATCH_MAX=3)
def test_a_full_message_leaves_without_waiting_for_the_company() -> None:
    publish = Recorder()
    with OtherWriter():
        fastpath.publish_combined(_rows(1, 2), publish)
        fastpath.publish_combined(_rows(3), publish)
        calls = publish.wait_for(1)  # while the other writer is still inside
        assert calls == [(_rows(1, 2, 3), "outbox-publisher")]


def test_a_publish_in_flight_is_company__the_next_rows_go_to_the_publisher() -> None:
    in_flight = threading.Event()
    release = threading.Event()
    publish = Recorder()

    def slow(rows: list[Any]) -> None:
        publish(rows)
        if rows == _rows(1):
            in_flight.set()
            assert release.wait(10)

    first = threading.Thread(target=fastpath.publish_combined, args=(_rows(1), slow), name="first")
    first.start()
    assert in_flight.wait(10)
    fastpath.publish_combined(_rows(2), slow)  # returns at once; nobody else is writing
    calls = publish.wait_for(2)
    assert calls == [(_rows(1), "first"), (_rows(2), "outbox-publisher")]
    release.set()
    first.join(10)


@override_settings(OUTBOX_LINGER_SECONDS=60.0)
def test_flush_publishes_what_waits_at_once() -> None:
    publish = Recorder()
    with OtherWriter():
        fastpath.publish_combined(_rows(1), publish)
        assert fastpath.flush(10)
        assert publish.calls == [(_rows(1), "outbox-publisher")]


def test_a_failing_publish_never_raises_and_the_next_rows_still_go() -> None:
    def broken(rows: list[Any]) -> None:
        raise ConnectionError("broker away")

    fastpath.publish_combined(_rows(1), broken)
    with OtherWriter():
        fastpath.publish_combined(_rows(2), broken)  # in the publisher thread: it survives
    assert fastpath.flush(10)
    publish = Recorder()
    fastpath.publish_combined(_rows(3), publish)
    assert publish.calls == [(_rows(3), threading.current_thread().name)]


@override_settings(OUTBOX_FASTPATH_MAX_ROWS=4)
def test_a_full_buffer__leaves_new_rows_to_the_relay__said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Publishes that hang (a broker outage) do not grow the process: past
    OUTBOX_FASTPATH_MAX_ROWS rows in hand, new rows stay reserved in the outbox for the
    relay and are never handed to `publish`."""
    release = threading.Event()
    publish = Recorder()

    def hanging(rows: list[Any]) -> None:
        publish(rows)
        assert release.wait(10)

    first = threading.Thread(target=fastpath.publish_combined, args=(_rows(1), hanging))
    first.start()
    publish.wait_for(1)  # inline, in flight
    fastpath.publish_combined(_rows(2, 3), hanging)
    publish.wait_for(2)  # the publisher thread took them and hangs too
    fastpath.publish_combined(_rows(4, 5, 6), hanging)  # 3 in hand
    fastpath.publish_combined(_rows(7, 8), hanging)  # 5 > 4: left to the relay
    fastpath.publish_combined(_rows(9, 10), hanging)
    release.set()
    first.join(10)
    assert fastpath.flush(10)

    published = [row for rows, _ in publish.calls for row in rows]
    assert published == _rows(1, 2, 3, 4, 5, 6)
    full = [r for r in caplog.records if "OUTBOX_FASTPATH_MAX_ROWS" in r.getMessage()]
    assert len(full) == 1
