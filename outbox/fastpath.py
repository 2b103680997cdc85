"""The fast path's publish: alone, inline; with company, one background publisher packs.

After a commit, a thread that is alone publishes its own rows at once, in its own thread (no
waiting, no hand-off: an idle system's accept -> start latency is one broker round trip).

A thread has company when another thread of the process is writing rows that will be
published (inside `writing()`: `jobs.submit` is), or a publish is in flight, or rows already
wait. Then it does not publish: it leaves its rows with the process's publisher thread and
returns. The publisher lingers while there is company, until the writers have committed, or
`OUTBOX_BATCH_MAX` rows wait, or the oldest row has waited `OUTBOX_LINGER_SECONDS`, and then
publishes everything in hand with one call, packed into batch messages where a rule allows
(outbox.batching). That is PostgreSQL's group commit (`commit_delay` with `commit_siblings`)
and Kafka's `linger.ms`, applied to publishing: batching waits only while there is company,
never when alone.

The rows in hand are bounded (OUTBOX_FASTPATH_MAX_ROWS): while a publish is slow or failing
(a broker outage: each failed call backs its rows off in the outbox), further rows are not held
but left reserved in the outbox, and the relay publishes them once the reservation lapses. An
outage therefore grows the outbox, never the process.

A process that dies with rows in hand loses only the publish: the rows are reserved, and the
relay publishes them when the reservation lapses (the crash windows
`submit.after_commit_before_publish` and, for rows the publisher holds,
`submit.publisher_before_publish`). A process that exits normally publishes what it holds
first (atexit). A forked child starts empty.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .background import Background, PerProcess
from .breaker import breaker
from .conf import outbox_settings
from .failpoints import failpoint
from .models import OutboxEntry

logger = logging.getLogger(__name__)

IDLE_EXIT_SECONDS = 10.0  # the publisher thread ends (and closes its connection) when idle

Publish = Callable[[list[OutboxEntry]], None]
F = TypeVar("F", bound=Callable[..., Any])

_local = threading.local()  # .depth: how deep this thread is in writing() blocks


class _Publisher(Background):
    """One process's rows in hand and the thread that publishes them with company."""

    thread_name = "outbox-publisher"

    def __init__(self) -> None:
        super().__init__()
        self.writers = 0  # threads inside writing()
        self.in_flight = 0  # publish calls running (inline or the publisher's)
        self.pending: dict[Publish, list[OutboxEntry]] = {}
        self.count = 0  # rows in pending
        self.oldest = 0.0  # monotonic time the oldest pending row arrived
        self.hurry = 0  # flush() calls waiting: publish now, no lingering
        self.full = False  # rows were left to the relay since the buffer last had room

    # -- writers ------------------------------------------------------------------------------

    def enter(self) -> None:
        with self.cond:
            self.writers += 1

    def leave(self) -> None:
        with self.cond:
            self.writers -= 1
            if self.writers == 0 and self.count:
                self.cond.notify_all()  # the company left: publish what waits

    # -- rows ---------------------------------------------------------------------------------

    def submit(self, rows: list[OutboxEntry], publish: Publish) -> None:
        mine = 1 if getattr(_local, "depth", 0) else 0
        with self.cond:
            alone = not self.count and not self.in_flight and self.writers - mine == 0
            # After a pause for a broker that was down, the probe is the publisher thread's
            # (outbox.breaker): a request never waits on it.
            alone = alone and not breaker.probing()
            if alone:
                self.in_flight += 1
            elif self.count + len(rows) > outbox_settings.FASTPATH_MAX_ROWS:
                self._leave_to_relay(len(rows))
                return
            else:
                if not self.count:
                    self.oldest = time.monotonic()
                self.pending.setdefault(publish, []).extend(rows)
                self.count += len(rows)
                self.ensure_thread()
                self.cond.notify_all()
                return
        try:
            _publish_logged(publish, rows)
        finally:
            with self.cond:
                self.in_flight -= 1
                if self.count:
                    self.cond.notify_all()

    def _leave_to_relay(self, n: int) -> None:
        """The buffer is full: these rows stay reserved in the outbox for the relay (said
        once per time it fills)."""
        if not self.full:
            self.full = True
            logger.warning(
                "outbox fast path holds %d rows (OUTBOX_FASTPATH_MAX_ROWS): leaving new rows "
                "to the relay until the publisher takes the rows in hand",
                self.count,
                extra={"n": n, "held": self.count},
            )

    def _due(self) -> float:
        """Seconds the rows in hand may still wait; <= 0: publish them now."""
        if (
            self.hurry
            or self.stopping
            or self.writers == 0
            or self.count >= outbox_settings.BATCH_MAX
        ):
            return 0.0
        return self.oldest + outbox_settings.LINGER_SECONDS - time.monotonic()

    def _take(self) -> dict[Publish, list[OutboxEntry]] | None:
        """Wait for rows and for their time; None after IDLE_EXIT_SECONDS without rows, or
        once stopping with none left."""
        with self.cond:
            while True:
                if not self.count:
                    if self.stopping or (not self.cond.wait(IDLE_EXIT_SECONDS) and not self.count):
                        self.thread = None
                        return None
                    continue
                left = self._due()
                if left <= 0:
                    taken, self.pending, self.count = self.pending, {}, 0
                    self.full = False
                    self.in_flight += 1
                    return taken
                self.cond.wait(left)

    def run(self) -> None:
        while (taken := self._take()) is not None:
            try:
                failpoint("submit.publisher_before_publish")
                for publish, rows in taken.items():
                    _publish_logged(publish, rows)
            finally:
                with self.cond:
                    self.in_flight -= 1
                    self.cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Publish the rows in hand now; True once none is left and no publish is in flight."""
        deadline = time.monotonic() + timeout
        with self.cond:
            self.hurry += 1
            self.cond.notify_all()
            try:
                while self.count or self.in_flight:
                    if self.count:
                        self.ensure_thread()
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(left)
                return True
            finally:
                self.hurry -= 1


def _publish_logged(publish: Publish, rows: list[OutboxEntry]) -> None:
    """Never raises: the transactions committed; a row whose publish failed waits for the
    relay (its reservation lapses)."""
    try:
        publish(rows)
    except Exception:
        logger.exception("outbox fast path failed; the relay will publish", extra={"n": len(rows)})


def _outside_writing() -> None:
    """A forked child's only thread starts outside any writing() block."""
    _local.__dict__.clear()


# A forked child starts empty; a normal exit publishes what is in hand (flush).
_publisher = PerProcess(_Publisher, flush_at_exit=True, after_fork=_outside_writing)


class writing:
    """Mark this thread as writing rows the fast path will publish (company for the others).

    A context manager, and a decorator: `jobs.submit` and `jobs.submit_many` are wrapped.
    Nested blocks count once.
    """

    def __enter__(self) -> None:
        depth = getattr(_local, "depth", 0)
        _local.depth = depth + 1
        if depth == 0:
            _publisher().enter()

    def __exit__(self, *exc: object) -> None:
        _local.depth -= 1
        if _local.depth == 0:
            _publisher().leave()

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def publish_combined(rows: list[OutboxEntry], publish: Publish) -> None:
    """Publish `rows` now, or leave them with the process's publisher (module docstring)."""
    _publisher().submit(rows, publish)


def flush(timeout: float = 5.0) -> bool:
    """Publish the rows this process holds now, without lingering; wait until they are out.

    True when nothing is left in hand. For a clean shutdown (done at exit), tests and
    benchmarks; a row never flushed is published by the relay once its reservation lapses.
    """
    current = _publisher.current()
    if current is None:
        return True
    return current.flush(timeout)


def stop(timeout: float = 5.0) -> None:
    """Publish what is in hand and end this process's publisher thread, closing its database
    connection (a test session before it drops its database)."""
    current = _publisher.current()
    if current is not None:
        current.stop(timeout)
