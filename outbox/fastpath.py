"""The fast path's publish: alone, inline; with company, one publisher packs for everyone.

After a commit, the submitting thread publishes its own rows at once (no waiting, so an
idle system's accept -> start latency is one broker round trip). When other threads of the
process commit while a publish is in flight, they do not publish beside it: they leave
their rows with it and return, and the thread in flight (the leader) publishes everything
left with it in one more call, packed into batch messages where a rule allows
(outbox.batching). That is group commit (PostgreSQL's commit_delay, Kafka's linger.ms)
without the wait: batching happens only while there is company.

A leader publishes at most MAX_ROUNDS rounds beyond its own, then gives up leadership with
the rows left in hand published in one last round: no thread serves the others for long, and
no row is left behind without a publisher. A process that dies with rows in hand loses only
the publish: the rows are reserved, and the relay publishes them when the reservation lapses
(the crash window `submit.after_commit_before_publish`). A forked child starts empty.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from .models import OutboxEntry

logger = logging.getLogger(__name__)

MAX_ROUNDS = 16

Publish = Callable[[list[OutboxEntry]], None]


class _Combiner:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.leading = False
        self.pending: list[OutboxEntry] = []

    def submit(self, rows: list[OutboxEntry], publish: Publish) -> None:
        with self.lock:
            if self.leading:
                self.pending.extend(rows)  # the leader publishes them with its next round
                return
            self.leading = True
        batch = rows
        rounds = 0
        while True:
            _publish_logged(publish, batch)
            with self.lock:
                batch, self.pending = self.pending, []
                rounds += 1
                last = not batch or rounds > MAX_ROUNDS
                if last:
                    self.leading = False
            if last:
                if batch:  # the last rows in hand; new arrivals find a new leader
                    _publish_logged(publish, batch)
                return


def _publish_logged(publish: Publish, rows: list[OutboxEntry]) -> None:
    """Never raises: the transactions committed; a row whose publish failed waits for the
    relay (its reservation lapses)."""
    try:
        publish(rows)
    except Exception:
        logger.exception("outbox fast path failed; the relay will publish", extra={"n": len(rows)})


_lock = threading.Lock()
_current: _Combiner | None = None


def _combiner() -> _Combiner:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():
            _current = _Combiner()
        return _current


def _after_fork_in_child() -> None:
    global _current, _lock
    _lock = threading.Lock()
    _current = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def publish_combined(rows: list[OutboxEntry], publish: Publish) -> None:
    """Publish `rows` now, or leave them with the publish in flight (module docstring)."""
    _combiner().submit(rows, publish)
