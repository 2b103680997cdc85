"""A process's background threads, in one pattern: made on first use, forgotten in a forked
child, flushed at exit, stopped cleanly in tests.

A `Background` is a service of one process with at most one daemon thread: the fast path's
publisher (outbox.fastpath), the mark flusher (outbox.marks), the heartbeat beater
(jobs.leases) and the worker's sightings (jobs.ops.workers). The service starts its thread when
it is first given work (`ensure_thread`, under `cond`); the thread closes its database
connection when it ends. `PerProcess` holds the one service of the running process:
  1. made on first use (`holder()`), under a lock;
  2. forgotten in a forked child (`os.register_at_fork`): the parent's thread did not survive
     the fork, and the parent's locks may have been held by it at that moment, so the child
     starts with a new lock and, on first use, a new service;
  3. with `flush_at_exit`, flushed when the interpreter exits (`atexit`: a normal exit does
     now what the thread would have done later; a crash leaves that to the relay);
  4. `stop()` ends the thread and flushes (a test session before it drops its database).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable
from typing import ClassVar

logger = logging.getLogger(__name__)


class Background:
    """A service of this process run by at most one daemon thread (module docstring).

    A subclass writes `run()`, the thread's loop, which returns once `stopping` is set (it is
    woken through `cond`) or when it chooses to end while idle; it may override `flush()`.
    """

    thread_name: ClassVar[str] = "background"

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None
        self.stopping = False

    def ensure_thread(self) -> None:
        """Start the thread unless it is running; call it holding `cond`."""
        if self.thread is None or not self.thread.is_alive():
            self.stopping = False
            self.thread = threading.Thread(target=self._main, name=self.thread_name, daemon=True)
            self.thread.start()

    def _main(self) -> None:
        try:
            self.run()
        finally:
            _close_db_connection()

    def run(self) -> None:
        raise NotImplementedError

    def flush(self) -> object:
        """Do now, in the calling thread, what the thread holds to do later (default: none)."""
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (joined for up to `timeout` seconds), then flush. The next
        `ensure_thread` starts a new one."""
        with self.cond:
            thread, self.stopping = self.thread, True
            self.cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.flush()


def _close_db_connection() -> None:
    try:
        from django.db import connection

        connection.close()
    except Exception:  # pragma: no cover - best effort on a thread's way out
        logger.debug("background thread: closing its connection failed", exc_info=True)


class PerProcess[S: Background]:
    """The one `S` of the running process (module docstring, steps 1-3)."""

    def __init__(
        self,
        factory: Callable[[], S],
        *,
        flush_at_exit: bool = False,
        after_fork: Callable[[], None] | None = None,
    ) -> None:
        self._factory = factory
        self._after_fork = after_fork
        self._lock = threading.Lock()
        self._current: S | None = None
        os.register_at_fork(after_in_child=self._forget_in_child)
        if flush_at_exit:
            atexit.register(self._flush_at_exit)

    def __call__(self) -> S:
        """This process's service, made now if there is none yet."""
        with self._lock:
            if self._current is None or self._current.pid != os.getpid():
                self._current = self._factory()
            return self._current

    def current(self) -> S | None:
        """This process's service if one was made; never makes one."""
        current = self._current
        return current if current is not None and current.pid == os.getpid() else None

    def forget(self) -> None:
        """Drop this process's service (tests); the next use makes a new one."""
        with self._lock:
            self._current = None

    def _forget_in_child(self) -> None:
        self._lock = threading.Lock()
        self._current = None
        if self._after_fork is not None:
            self._after_fork()

    def _flush_at_exit(self) -> None:
        current = self.current()
        if current is not None:
            current.flush()
