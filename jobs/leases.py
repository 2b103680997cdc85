"""Leases and fencing: a claimed job's lease, kept alive, and written only by its owner.

The claim that makes a lease lives in jobs.claims (`job_claim_id`, the database function
`jobs_claim`) and jobs.batch (`jobs_claim_many`). Its commit does not wait for its WAL flush.
If a database crash loses it, the job is back to its previous state and nothing of this
attempt is durable: every later write of ours is fenced by (generation, owner token) and
commits synchronously, which would have flushed the claim first. A new claim after the crash
may reuse the generation number, never our token.
Every later write by this worker is a conditional UPDATE on (id, generation, lease_owner,
state='leased'); the owner token is unique per claim (worker name, a random nonce, pid).
Zero rows: `LeaseLost`, rolled back and counted. The heartbeat (`Heartbeat`, one thread per
process for all its leases) extends a live lease and learns of a cancel request or a lost
lease.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import close_old_connections, connection, transaction
from django.db.models import QuerySet

from outbox.background import Background, PerProcess

from . import prepared
from .counters import STALE_WRITES_REJECTED, counter_increment
from .exceptions import LeaseLost
from .models import Job
from .plans import in_states
from .states import JobState

logger = logging.getLogger(__name__)


# The fields of a Lease that a job row holds under the same name.
_ROW_FIELDS = (
    "generation",
    "attempt",
    "kind",
    "kind_version",
    "input_version",
    "owner_id",
    "tenant_id",
    "serialization_key",
    "deadline",
    "priority",
)


@dataclass(frozen=True)
class Lease:
    """What a worker holds after a successful claim: the fencing token is `generation`."""

    job_id: UUID
    generation: int
    attempt: int
    worker: str
    lease_seconds: float
    kind: str
    kind_version: int
    input_version: int
    owner_id: int
    tenant_id: int | None
    serialization_key: str | None
    deadline: datetime | None
    previous_state: str
    claimed_at: datetime
    # False for a batch claim (jobs_claim_many): the row's attempt counter still holds the
    # previous attempt; the outcome charges `attempt` once the handler started.
    charged: bool = True
    # The job's priority (jobs_job.priority): its retry's or release's message carries it.
    priority: int = 0

    @classmethod
    def from_row(
        cls,
        job_id: UUID,
        row: Mapping[str, Any],
        *,
        worker: str,
        lease_seconds: float,
        previous_state: str,
        claimed_at: datetime,
        charged: bool = True,
    ) -> Lease:
        """The lease a job's row describes, read by column name: a claim function's row, or a
        Job's fields (`vars(job)`: the same names)."""
        return cls(
            job_id=job_id,
            worker=worker,
            lease_seconds=lease_seconds,
            previous_state=previous_state,
            claimed_at=claimed_at,
            charged=charged,
            **{name: row[name] for name in _ROW_FIELDS},
        )

    def log_extra(self) -> dict[str, Any]:
        return {
            "job_id": str(self.job_id),
            "kind": self.kind,
            "attempt": self.attempt,
            "generation": self.generation,
            "worker": self.worker,
        }


def fenced(lease: Lease) -> QuerySet[Job]:
    """The job row, only while this claim (generation and owner token) still holds it."""
    rows = Job.objects.filter(
        pk=lease.job_id, generation=lease.generation, lease_owner=lease.worker
    )
    return in_states(rows, [JobState.LEASED.value])  # by primary key (jobs.plans)


def lease_lost(lease: Lease) -> LeaseLost:
    """The error of a fenced write that found the lease gone."""
    return LeaseLost(f"job {lease.job_id}: generation {lease.generation} no longer holds the lease")


def job_update_if_leased(lease: Lease, **fields: Any) -> None:
    """Guarded write: UPDATE ... WHERE id, generation, state='leased'; zero rows -> LeaseLost."""
    if fenced(lease).update(**fields) != 1:
        raise lease_lost(lease)


def report_stale_write(lease: Lease, where: str) -> None:
    """Loud, never silent: a counter and a log line for a fenced write that matched nothing."""
    counter_increment(STALE_WRITES_REJECTED)
    logger.warning("stale write rejected at %s", where, extra=lease.log_extra())


@contextmanager
def fenced_transaction(lease: Lease, where: str, *, atomic: bool = True) -> Iterator[None]:
    """`transaction.atomic` for a lease's writes: a LeaseLost inside rolls it back and is
    counted and logged (report_stale_write) before it propagates. atomic=False for a single
    statement that is its own transaction."""
    try:
        if atomic:
            with transaction.atomic():
                yield
        else:
            yield
    except LeaseLost:
        report_stale_write(lease, where)
        raise


@dataclass(frozen=True)
class HeartbeatResult:
    alive: bool
    cancel_requested: bool


def lease_heartbeat(lease: Lease) -> HeartbeatResult:
    """Extend the lease on the database clock, fenced by generation."""
    result = lease_heartbeat_many([lease]).get(lease.job_id)
    return result or HeartbeatResult(alive=False, cancel_requested=False)


class Heartbeat:
    """Extends one lease every lease/3 seconds until stopped.

    Beats run on the process's one heartbeat thread (`_Beater`, with its own database
    connection), not on a thread per job: starting and joining a thread for every job cost
    about a fifth of a worker's time per no-op job. After `stop()` returns no beat of this
    lease is running or will run, so the completion that follows never races its heartbeat.
    """

    def __init__(
        self, lease: Lease, *, on_lost: Any, on_cancel: Any, on_extended: Any = None
    ) -> None:
        self.lease = lease
        self.interval = max(lease.lease_seconds / 3.0, 0.05)
        self._on_lost = on_lost
        self._on_cancel = on_cancel
        self._on_extended = on_extended  # called with the monotonic time the beat was sent
        self._lock = threading.Lock()
        self._stopped = False
        self._answered_at = time.monotonic()

    def failed(self) -> None:
        """A beat that could not reach the database: say so, with how long none answered."""
        silent = time.monotonic() - self._answered_at
        logger.exception(
            "heartbeat failed: no extension answered for %.1fs of a %.0fs lease",
            silent,
            self.lease.lease_seconds,
            extra=self.lease.log_extra(),
        )
        close_old_connections()

    def beat(self) -> bool:
        """One heartbeat; False once the lease is gone."""
        sent_at = time.monotonic()
        try:
            result = lease_heartbeat(self.lease)
        except Exception:
            self.failed()
            return True  # keep trying: the lease may still be ours until it expires
        if not result.alive:
            report_stale_write(self.lease, "heartbeat")
            self._on_lost()
            return False
        self._answered_at = sent_at
        if self._on_extended is not None:
            self._on_extended(sent_at)
        if result.cancel_requested:
            self._on_cancel()
        return True

    def tick(self) -> bool:
        """A beat unless stopped; False when this lease needs no more beats."""
        with self._lock:
            return not self._stopped and self.beat()

    def start(self) -> None:
        _beater().add(self)

    def stop(self) -> None:
        _beater().remove(self)
        # Wait for a beat in flight (bounded, as the old per-job thread's join was).
        if self._lock.acquire(timeout=self.interval + 5):
            self._stopped = True
            self._lock.release()
        else:
            self._stopped = True
            logger.warning("heartbeat still running at stop", extra=self.lease.log_extra())


# jobs/sql/jobs_heartbeat_many.sql: its lock waits end after lock_timeout.
_HEARTBEAT_MANY_SQL = (
    "SELECT * FROM jobs_heartbeat_many(%s::uuid[], %s::bigint[], %s::float8[], %s::text)"
)


@dataclass(frozen=True)
class Member:
    """One lease of a batch and what to tell its job's context."""

    lease: Lease
    on_lost: Any
    on_cancel: Any
    on_extended: Any = None


def lease_heartbeat_many(leases: list[Lease]) -> dict[UUID, HeartbeatResult]:
    """Extend many leases of one owner token in one statement, each fenced by its own
    generation; a lease that is gone is absent from the answer."""
    if not leases:
        return {}
    rows = prepared.fetchall(
        _HEARTBEAT_MANY_SQL,
        [
            [lease.job_id for lease in leases],
            [lease.generation for lease in leases],
            [float(lease.lease_seconds) for lease in leases],  # one type for psycopg
            leases[0].worker,
        ],
    )
    return {
        row["id"]: HeartbeatResult(alive=True, cancel_requested=bool(row["cancel_requested"]))
        for row in rows
    }


class BatchHeartbeat(Heartbeat):
    """The leases of one batch, extended together (one statement per beat) until the group
    commit: a job whose handler finished still holds its lease until its outcome commits.
    A lease found gone tells only its own job (`on_lost`); the others beat on."""

    def __init__(self, members: list[Member]) -> None:
        first = members[0].lease
        super().__init__(first, on_lost=None, on_cancel=None)
        self.interval = max(min(m.lease.lease_seconds for m in members) / 3.0, 0.05)
        self._members = {m.lease.job_id: m for m in members}

    def beat(self) -> bool:
        live = [m.lease for m in self._members.values()]
        sent_at = time.monotonic()
        try:
            results = lease_heartbeat_many(live)
        except Exception:
            self.failed()
            return True  # the leases may still be ours until they expire
        self._answered_at = sent_at
        for lease in live:
            member = self._members[lease.job_id]
            result = results.get(lease.job_id)
            if result is None:
                report_stale_write(lease, "heartbeat")
                member.on_lost()
                del self._members[lease.job_id]
                continue
            if member.on_extended is not None:
                member.on_extended(sent_at)
            if result.cancel_requested:
                member.on_cancel()
        return bool(self._members)


class _Beater(Background):
    """The process's heartbeat thread: beats every registered lease when it is due.

    Registering a lease wakes the thread only when it would otherwise sleep past that lease's
    first beat, and removing one never does: a wake-up per job start and end (a thread switch
    each) was a tenth of a no-op job's time in the worker. A removed lease is dropped when the
    thread next looks; with none left it closes its database connection and sleeps.
    """

    thread_name = "jobs-heartbeat"

    def __init__(self) -> None:
        super().__init__()
        self._due: dict[Heartbeat, float] = {}  # keyed by identity
        # When the thread will look at _due again on its own; -inf while it is awake.
        self._wake_at = -math.inf

    def add(self, heartbeat: Heartbeat) -> None:
        with self.cond:
            due = time.monotonic() + heartbeat.interval
            self._due[heartbeat] = due
            self.ensure_thread()
            if due < self._wake_at:
                self.cond.notify()

    def remove(self, heartbeat: Heartbeat) -> None:
        with self.cond:
            self._due.pop(heartbeat, None)

    def _sleep(self, timeout: float | None) -> None:
        """Wait (holding self.cond) until notified or `timeout` seconds pass."""
        self._wake_at = math.inf if timeout is None else time.monotonic() + timeout
        try:
            self.cond.wait(timeout)
        finally:
            self._wake_at = -math.inf

    def _next_ready(self) -> list[Heartbeat] | None:
        """The leases due for a beat now (waiting until one is); None when there are none."""
        with self.cond:
            while self._due and not self.stopping:
                now = time.monotonic()
                ready = [hb for hb, due in self._due.items() if due <= now]
                if ready:
                    for hb in ready:
                        self._due[hb] = now + hb.interval
                    return ready
                self._sleep(min(self._due.values()) - now)
            return None

    def run(self) -> None:
        while not self.stopping:
            ready = self._next_ready()
            if ready is None:
                connection.close()  # nothing to beat: hold no database connection
                with self.cond:
                    while not self._due and not self.stopping:
                        self._sleep(None)
                continue
            for heartbeat in ready:
                try:
                    alive = heartbeat.tick()
                except Exception:  # one lease's callback must not stop every lease's beats
                    logger.exception("heartbeat tick failed", extra=heartbeat.lease.log_extra())
                    close_old_connections()
                    continue
                if not alive:
                    self.remove(heartbeat)


# The heartbeat thread of this process (a forked child starts its own).
_beater = PerProcess(_Beater)
