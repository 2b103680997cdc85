"""A worker that cannot reach the database hands its messages back and stops taking more.

1. A delivery (`jobs.execute`, `jobs.execute_many`) whose claim, heartbeat or commit fails on
   the connection (Django's OperationalError or InterfaceError, after the claim's own retry on
   a fresh connection) raises Celery's `Reject(requeue=True)`: the message goes back to its
   queue, unacked work is never acked (a crash here leaves the message unacked: the broker
   redelivers it as it would after any crash). A database that answered with an error of the
   statement (a lock wait past the hot functions' lock_timeout, a deadlock, a cancelled query)
   is reachable: the message is requeued the same way, but the worker goes on consuming.
2. The worker's main process sees the rejection (`GatedRequest.on_failure`) and cancels its
   consumers of the jobs queues (Celery's own consumer control, sent to this worker only), so
   messages it prefetched come back rejected and healthy hosts take the queue.
3. A probe thread opens a fresh connection every JOBS_WORKER_DB_PROBE_INTERVAL seconds (each
   bounded by the connection's connect timeout); the first that answers re-adds the consumers.
   A crash while paused leaves nothing: a new worker starts consuming.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Task
from celery.exceptions import Reject
from celery.worker.request import Request
from django.db import InterfaceError, OperationalError, connection

from .conf import jobs_settings

logger = logging.getLogger(__name__)

DATABASE_UNREACHABLE = (InterfaceError, OperationalError)

# SQLSTATEs of an OperationalError that say the server is gone or refuses sessions; any other
# code came from a server that answered (lock_not_available 55P03, query_canceled 57014,
# deadlock_detected 40P01...). No code at all is a client-side failure: a refused or broken
# connection, a timeout.
_GONE_CLASSES = ("08",)  # connection_exception
_GONE_CODES = frozenset({"57P01", "57P02", "57P03", "53300"})  # shutdowns, too many connections


class DatabaseUnreachable(Reject):
    """The delivery could not reach the database: requeue its message, pause consuming."""


class DatabaseRefusedStatement(Reject):
    """The database answered with an error of the statement: requeue, keep consuming."""


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error (Django's wraps the driver's as its cause)."""
    for error in (exc, exc.__cause__):
        code = getattr(error, "sqlstate", None)
        if code:
            return str(code)
    return None


def database_failed(exc: BaseException) -> bool:
    """A database error that is not about what a handler or local effect wrote: the server
    is unreachable or refused the write for a lock. Such an error belongs to the delivery
    (retried, or its message requeued), never to the job as its failure."""
    return database_unreachable(exc) or refused_for_a_lock(exc)


def database_unreachable(exc: BaseException) -> bool:
    """Whether a database error means the server cannot be reached (or refuses sessions),
    rather than an answer about one statement."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    code = sqlstate(exc)
    return code is None or code.startswith(_GONE_CLASSES) or code in _GONE_CODES


# A refusal about locks: the statement's transaction rolled back whole, and the same write
# run again a moment later usually goes through (lock_not_available: a row held past the hot
# functions' lock_timeout; deadlock_detected; serialization_failure).
_REFUSALS_RETRIED = frozenset({"55P03", "40P01", "40001"})
REFUSED_TRIES = 3  # the write and two more, each after a jittered pause
REFUSED_PAUSE = (0.05, 0.25)  # seconds, times the try's number


def refused_for_a_lock(exc: BaseException) -> bool:
    """Whether a database error is a refusal about locks (the write may go through later)."""
    return isinstance(exc, OperationalError) and sqlstate(exc) in _REFUSALS_RETRIED


def retried_when_refused[T](write: Callable[[], T], *, what: str) -> T:
    """`write()` (a write that commits on its own: its transaction is inside it), run again
    when the database refused it for a lock; after REFUSED_TRIES refusals the error escapes
    (a delivery then requeues its message: `requeued_when_database_unreachable`).

    A refused transaction committed nothing, so the retry is the same write, still fenced by
    the lease's generation. A finished attempt is then kept instead of being run again after
    its lease expires. Inside a caller's transaction nothing is retried: that transaction is
    aborted and only its owner can start it again."""
    for attempt in range(1, REFUSED_TRIES + 1):
        try:
            return write()
        except OperationalError as exc:
            if attempt == REFUSED_TRIES or not refused_for_a_lock(exc):
                raise
            if connection.in_atomic_block:
                raise
            logger.warning(
                "the database refused %s (SQLSTATE %s); trying again (%d of %d)",
                what,
                sqlstate(exc),
                attempt + 1,
                REFUSED_TRIES,
            )
            time.sleep(random.uniform(*REFUSED_PAUSE) * attempt)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


@contextmanager
def requeued_when_database_unreachable(what: str) -> Iterator[None]:
    """Turns a database failure escaping a delivery into a requeue of its message."""
    try:
        yield
    except DATABASE_UNREACHABLE as exc:
        cause = f"{type(exc).__name__}: {exc}".strip()[:300]
        connection.close()  # the next delivery starts on a fresh connection
        # Without the cause: Celery logs the rejection with its traceback, the cause is logged.
        if not database_unreachable(exc):
            logger.warning(
                "the database refused a statement of %s (SQLSTATE %s); message requeued, "
                "not acked: %s",
                what,
                sqlstate(exc),
                cause,
            )
            raise DatabaseRefusedStatement(str(exc)[:300], requeue=True) from None
        logger.warning(
            "database unreachable during %s; message requeued, not acked: %s", what, cause
        )
        raise DatabaseUnreachable(str(exc)[:300], requeue=True) from None


class GatedRequest(Request):
    """The jobs tasks' Request in the worker's main process: a delivery that found the
    database unreachable pauses this worker's jobs consumers (step 2)."""

    def on_failure(
        self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
    ) -> Any:
        if isinstance(getattr(exc_info, "exception", None), DatabaseUnreachable):
            _gate.pause(self.app, self.hostname)
        return super().on_failure(exc_info, send_failed_event, return_ok)


class GatedTask(Task):  # type: ignore[type-arg,unused-ignore]
    """The base of `jobs.execute` and `jobs.execute_many`: their requests report to the gate."""

    Request = "jobs.gate:GatedRequest"


class ConsumerGate:
    """Pauses and resumes one worker's consumers of the jobs queues (steps 2-3)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused: list[str] = []
        self._prober: threading.Thread | None = None
        self._stop = threading.Event()
        self.consumer: Any = None  # set at worker_ready (jobs.celery_hooks)

    @property
    def paused(self) -> bool:
        return bool(self._paused)

    def consumed_jobs_queues(self) -> list[str]:
        from .worker_checks import jobs_queues

        consumer = self.consumer
        if consumer is None:
            return []
        names = {queue.name for queue in consumer.task_consumer.queues}
        return sorted(names & jobs_queues())

    def pause(self, app: Any, hostname: str | None) -> None:
        with self._lock:
            if self._paused or self._stop.is_set():
                return
            queues = self.consumed_jobs_queues()
            if not queues or not hostname:
                return
            self._paused = queues
            self._prober = threading.Thread(
                target=self._probe_until_reachable,
                args=(app, hostname),
                name="jobs-db-gate",
                daemon=True,
            )
        logger.warning(
            "database unreachable: this worker stops consuming %s until it answers",
            ", ".join(queues),
        )
        for queue in queues:
            app.control.cancel_consumer(queue, destination=[hostname], reply=False)
        self._prober.start()

    def _probe_until_reachable(self, app: Any, hostname: str) -> None:
        interval = float(jobs_settings.WORKER_DB_PROBE_INTERVAL)
        while not self._stop.wait(interval):
            if database_answers():
                break
        else:
            return
        with self._lock:
            queues, self._paused = self._paused, []
        for queue in queues:
            app.control.add_consumer(queue, destination=[hostname], reply=False)
        logger.warning("database answers again: this worker consumes %s again", ", ".join(queues))

    def stop(self) -> None:
        self._stop.set()


def database_answers() -> bool:
    """One `SELECT 1` on a fresh connection of this thread, closed after."""
    try:
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DATABASE_UNREACHABLE:
        return False
    finally:
        connection.close()


_gate = ConsumerGate()


def gate() -> ConsumerGate:
    return _gate
