"""The fast path's pause while the broker is down: a submit does not wait on it.

Alone, a thread publishes its rows inline right after its commit (outbox.fastpath), so a web
request that submits waits for that publish. With the broker down that is a failed connect
and its retries per request: 0.45 s against a refused port, and against a broker that
vanished without closing TCP (a partition) up to `socket_connect_timeout` for each of the
retries. So once a publish call of this process fails on the broker connection
(`outbox.relay.BROKER_DOWN`), the process pauses its fast path (a circuit breaker):

  - paused (`paused()`): new rows are written unreserved (`outbox_reserved_until`), so the
    relay publishes them at its next sweep, from wherever it runs; the submit returns after
    its commit, with no broker call;
  - after the pause (PAUSE_FIRST, doubled after each failed probe up to PAUSE_MAX), a row is
    reserved again but handed to the process's background publisher (`probing()`), never
    published inline: the probe's cost falls on that thread, not on a request;
  - the first publish call that goes through (fast path or relay, in this process) ends it.

Only the first request that meets the outage (and those already publishing with it) waits.
The relay itself never pauses: its sweeps are how the rows get out once the broker answers.
Per process; a forked child starts unpaused. Tests: tests/unit/test_breaker.py,
tests/integration/test_fastpath_pause.py (a broker that closes every connection) and
tests/network/test_web_host_cut.py (a web host whose Redis route is cut in the kernel).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

PAUSE_FIRST = 1.0  # seconds the fast path pauses after its first failure
PAUSE_MAX = 16.0  # the longest pause: a probe at least this often while the broker is down


class Breaker:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        """Unpaused, with a new lock."""
        self.lock = threading.Lock()
        self.pause = 0.0  # the current pause; 0: the broker answered last
        self.until = 0.0  # monotonic time the current pause ends

    def paused(self) -> bool:
        """True while new rows should go to the relay, not to this process's fast path."""
        return self.pause > 0 and self.clock() < self.until

    def probing(self) -> bool:
        """True after a pause, until a publish goes through: rows go to the background
        publisher, never inline."""
        return self.pause > 0

    def failed(self, error: str) -> None:
        """A publish call of this process failed on the broker connection."""
        with self.lock:
            self.pause = min(PAUSE_MAX, self.pause * 2) if self.pause else PAUSE_FIRST
            self.until = self.clock() + self.pause
            pause = self.pause
        logger.warning(
            "outbox fast path paused for %.0f s, the broker is down (%s): the relay "
            "publishes new rows",
            pause,
            error,
            extra={"pause_seconds": pause, "error": error},
        )

    def succeeded(self) -> None:
        """A publish call of this process went through."""
        if not self.pause:
            return
        with self.lock:
            was, self.pause, self.until = self.pause, 0.0, 0.0
        if was:
            logger.info("outbox fast path resumed: the broker answers")


breaker = Breaker()
# In place (a new lock, unpaused): modules hold this object, and the parent's lock may have
# been held by another thread at the fork.
os.register_at_fork(after_in_child=breaker.reset)
