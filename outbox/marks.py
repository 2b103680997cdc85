"""The fast path's "published" marks, batched per process.

After the fast path publishes a row it must mark it published, or the relay publishes it
again once the row's reservation lapses. The mark has no other job, and no deadline but that
lapse (`OUTBOX_RESERVATION_SECONDS`, default 30 s). So a submitting process does not pay a
round trip and a commit per job for it: `mark_later(ids)` queues the ids, and one thread per
process marks everything queued with one call of `outbox_mark_published` every
`OUTBOX_MARK_INTERVAL` seconds (default 0.25). `OUTBOX_MARK_INTERVAL = 0` marks at once,
in the caller's thread, as the relay's own sweep always does.

A process that dies with ids queued loses those marks: the relay publishes the rows again
after their reservation lapses and the claim absorbs the duplicate, which is the outcome of a
crash between publish and mark (chaos/test_acceptance_crashes.py). A mark that fails (the
database away) is tried again at the next tick; the rows' reservations keep the relay off
them meanwhile, and once those lapse a second publish is, again, only a duplicate.
A forked child (a prefork pool, a web server's workers) starts with an empty queue of its own.
"""

from __future__ import annotations

import logging
import threading

from django.db import connection

from .background import Background, PerProcess
from .conf import outbox_settings
from .counters import RELAY_PUBLISHED

logger = logging.getLogger(__name__)

IDLE_CLOSE_SECONDS = 10.0  # the thread drops its database connection after this long idle
FAILURE_PAUSE_SECONDS = 1.0
MAX_QUEUED = 100_000  # beyond this (the database away for long), the oldest marks are dropped


def outbox_mark_published(ids: list[int]) -> int:
    """Step 3: one call of `outbox_mark_published` (migration 0003): rows published by
    someone else meanwhile are left alone; counts relay_published_total; its commit does not
    wait for the WAL flush (a lost mark only republishes, and the claim absorbs that)."""
    if not ids:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT outbox_mark_published(%s::bigint[], %s::text)", [ids, RELAY_PUBLISHED]
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


class _Marks(Background):
    """One process's queued ids and the thread that marks them."""

    thread_name = "outbox-marks"

    def __init__(self) -> None:
        super().__init__()
        self.flushing = threading.Lock()  # a flush() returns after any flush in flight
        self.ids: list[int] = []
        self.failing = False

    def add(self, ids: list[int]) -> None:
        with self.cond:
            was_empty = not self.ids
            self.ids.extend(ids)
            if len(self.ids) > MAX_QUEUED:
                dropped = len(self.ids) - MAX_QUEUED
                del self.ids[:dropped]
                logger.warning("outbox marks dropped; the relay republishes", extra={"n": dropped})
            if self.thread is None or not self.thread.is_alive():
                self.ensure_thread()
            elif was_empty:
                self.cond.notify()  # one wake-up per batch, not per id

    def flush(self) -> int:
        """Mark every queued id now, in the calling thread; on failure queue them again."""
        with self.flushing:
            with self.cond:
                ids, self.ids = self.ids, []
            if not ids:
                return 0
            try:
                marked = outbox_mark_published(ids)
            except Exception:
                if not self.failing:
                    logger.exception("outbox marks failed; trying again", extra={"n": len(ids)})
                self.failing = True
                connection.close()
                with self.cond:
                    self.ids[:0] = ids
                return 0
        if self.failing:
            logger.info("outbox marks recovered", extra={"n": len(ids)})
        self.failing = False
        return marked

    def _wait(self) -> bool:
        """Wait until ids are queued (True) or the thread must stop (False)."""
        with self.cond:
            idle = not self.cond.wait_for(lambda: self.ids or self.stopping, IDLE_CLOSE_SECONDS)
            if idle:
                connection.close()  # nothing to mark for a while: hold no connection
                self.cond.wait_for(lambda: self.ids or self.stopping)
            return not self.stopping

    def run(self) -> None:
        while self._wait():
            # Let a batch gather; after a failure, give the database a second. stop()
            # interrupts the pause.
            pause = FAILURE_PAUSE_SECONDS if self.failing else outbox_settings.MARK_INTERVAL
            with self.cond:
                self.cond.wait_for(lambda: self.stopping, pause)
            self.flush()


# A child starts with no queue and no thread; a normal exit marks what is queued.
_marks = PerProcess(_Marks, flush_at_exit=True)


def mark_later(ids: list[int]) -> None:
    """Mark these published rows soon (module docstring); at once if the interval is 0."""
    if not ids:
        return
    if not outbox_settings.MARK_INTERVAL:
        outbox_mark_published(ids)
        return
    _marks().add(ids)


def flush() -> int:
    """Mark what this process has queued, now (shutdown hooks, tests); returns rows marked.
    Any batch the thread was marking is done when this returns."""
    return _marks().flush()


def stop(timeout: float = 5.0) -> None:
    """Mark what is queued and end this process's mark thread, closing its connection (a
    test session before it drops its database). The next `mark_later` starts a new one."""
    _marks().stop(timeout)
