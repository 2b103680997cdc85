"""Leases and fencing: claim a job, keep it alive, and write only while still its owner.

Claim protocol (`job_claim`), one transaction:
  1. Lock the row if it is claimable now: due `queued`/`retry_wait`, or `leased` with an expired
     lease; for a serialization key, only the oldest active job of that key; within the
     tenant's and kind's concurrency caps. SKIP LOCKED: a concurrent claimer wins, we miss.
  2. UPDATE it to `leased` with generation+1, attempt+1, our name and a lease on the database
     clock; insert the JobEvent; commit. A crash after the commit leaves a leased job whose
     lease expires: the reaper moves it to retry_wait (the attempt counts) and re-enqueues it.
Every later write by this worker is a conditional UPDATE on (id, generation, lease_owner,
state='leased'); the owner token is unique per claim (worker name, a random nonce, pid), so the
fence holds even if a database crash lost an (asynchronously committed) claim and the number
was handed out again. Zero rows: `LeaseLost`, rolled back and counted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import IntegrityError, close_old_connections, connection, transaction
from django.db.models import QuerySet

from . import registry
from .dispatch import admission_lock, admission_lock_keys
from .exceptions import LeaseLost
from .models import Job, JobEvent
from .signals import STALE_WRITES_REJECTED, signal_increment
from .states import JobState

logger = logging.getLogger(__name__)


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

    def log_extra(self) -> dict[str, Any]:
        return {
            "job_id": str(self.job_id),
            "kind": self.kind,
            "attempt": self.attempt,
            "generation": self.generation,
            "worker": self.worker,
        }


_CLAIM_SQL = """
WITH target AS (
    SELECT j.id, j.state AS previous_state
    FROM jobs_job j
    WHERE j.id = %(id)s
      AND (
        (j.state IN ('queued', 'retry_wait') AND j.next_attempt_at <= clock_timestamp())
        -- Taking over an expired lease spends an attempt: only within budget, else the
        -- reaper quarantines it (a poison job redelivered on worker loss must not loop).
        OR (j.state = 'leased' AND j.lease_until < now() AND j.attempt < j.max_attempts
            AND (j.deadline IS NULL OR j.deadline > now()))
      )
      AND (
        j.serialization_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM jobs_job e
          WHERE e.serialization_key = j.serialization_key
            AND e.state IN ('queued', 'leased', 'retry_wait')
            AND (e.created_at, e.id) < (j.created_at, j.id)
        )
      )
      AND (
        %(tenant_limit)s::int IS NULL OR j.tenant_id IS NULL OR (
          SELECT count(*) FROM jobs_job t
          WHERE t.tenant_id = j.tenant_id AND t.kind = j.kind AND t.state = 'leased'
            AND t.id <> j.id
        ) < %(tenant_limit)s::int
      )
      AND (
        %(kind_limit)s::int IS NULL OR (
          SELECT count(*) FROM jobs_job k
          WHERE k.kind = j.kind AND k.state = 'leased' AND k.id <> j.id
        ) < %(kind_limit)s::int
      )
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs_job AS j SET
    state = 'leased',
    generation = j.generation + 1,
    attempt = j.attempt + 1,
    lease_owner = %(worker)s,
    lease_until = now() + make_interval(secs => %(lease)s),
    heartbeat_at = now(),
    started_at = COALESCE(j.started_at, now()),
    updated_at = now()
FROM target
WHERE j.id = target.id
RETURNING j.generation, j.attempt, j.kind, j.kind_version, j.input_version, j.owner_id,
          j.tenant_id, j.serialization_key, j.deadline, target.previous_state, now()
"""


def _claim_limits(job: Job) -> tuple[registry.KindSpec | None, int | None, int | None]:
    spec = registry.kind_version(job.kind, job.kind_version)
    return (spec, spec.tenant_limit, spec.kind_limit) if spec else (None, None, None)


def job_claim(job: Job, *, worker: str, lease_seconds: float) -> Lease | None:
    """Take the lease of `job` (see module docstring); None when it is not ours to run now."""
    spec, tenant_limit, kind_limit = _claim_limits(job)
    lock_keys = admission_lock_keys(
        kind=job.kind, tenant_id=job.tenant_id, serialization_key=None, spec=spec
    )
    try:
        with transaction.atomic():
            # Caps are counts over other rows: claimers of one tenant/kind take turns.
            admission_lock(lock_keys)
            with connection.cursor() as cursor:
                # The claim need not wait for its WAL flush. If a database crash loses it, the
                # job is back to its previous state and nothing of this attempt is durable:
                # every later write of ours is fenced by (generation, owner token) and commits
                # synchronously, which would have flushed the claim first. A new claim after
                # the crash may reuse the generation number, but never our owner token.
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
                cursor.execute(
                    _CLAIM_SQL,
                    {
                        "id": job.id,
                        "worker": worker,
                        "lease": lease_seconds,
                        "tenant_limit": tenant_limit,
                        "kind_limit": kind_limit,
                    },
                )
                row = cursor.fetchone()
            if row is None:
                return None
            lease = Lease(
                job_id=job.id,
                generation=row[0],
                attempt=row[1],
                worker=worker,
                lease_seconds=lease_seconds,
                kind=row[2],
                kind_version=row[3],
                input_version=row[4],
                owner_id=row[5],
                tenant_id=row[6],
                serialization_key=row[7],
                deadline=row[8],
                previous_state=row[9],
                claimed_at=row[10],
            )
            JobEvent.objects.create(
                job_id=job.id,
                from_state=lease.previous_state,
                to_state=JobState.LEASED.value,
                generation=lease.generation,
                attempt=lease.attempt,
                worker=worker,
                reason="claimed" if lease.previous_state != "leased" else "took over expired lease",
            )
    except IntegrityError:
        # jobs_job_one_leased_per_serialization_key: another job of the key holds it.
        return None
    return lease


def fenced(lease: Lease) -> QuerySet[Job]:
    """The job row, only while this claim (generation and owner token) still holds it."""
    return Job.objects.filter(
        pk=lease.job_id,
        generation=lease.generation,
        lease_owner=lease.worker,
        state=JobState.LEASED.value,
    )


def job_update_if_leased(lease: Lease, **fields: Any) -> None:
    """Guarded write: UPDATE ... WHERE id, generation, state='leased'; zero rows -> LeaseLost."""
    if fenced(lease).update(**fields) != 1:
        raise LeaseLost(
            f"job {lease.job_id}: generation {lease.generation} no longer holds the lease"
        )


def report_stale_write(lease: Lease, where: str) -> None:
    """Loud, never silent: a counter and a log line for a fenced write that matched nothing."""
    signal_increment(STALE_WRITES_REJECTED)
    logger.warning("stale write rejected at %s", where, extra=lease.log_extra())


@contextmanager
def fenced_transaction(lease: Lease, where: str) -> Iterator[None]:
    """`transaction.atomic` for a lease's writes: a LeaseLost inside rolls it back and is
    counted and logged (report_stale_write) before it propagates."""
    try:
        with transaction.atomic():
            yield
    except LeaseLost:
        report_stale_write(lease, where)
        raise


@dataclass(frozen=True)
class HeartbeatResult:
    alive: bool
    cancel_requested: bool


_HEARTBEAT_SQL = """
UPDATE jobs_job SET lease_until = now() + make_interval(secs => %s), heartbeat_at = now()
WHERE id = %s AND generation = %s AND lease_owner = %s AND state = 'leased'
RETURNING cancel_requested_at IS NOT NULL
"""


def lease_heartbeat(lease: Lease) -> HeartbeatResult:
    """Extend the lease on the database clock, fenced by generation."""
    with connection.cursor() as cursor:
        cursor.execute(
            _HEARTBEAT_SQL, [lease.lease_seconds, lease.job_id, lease.generation, lease.worker]
        )
        row = cursor.fetchone()
    if row is None:
        return HeartbeatResult(alive=False, cancel_requested=False)
    return HeartbeatResult(alive=True, cancel_requested=bool(row[0]))


class Heartbeat(threading.Thread):
    """Extends the lease every lease/3 seconds on its own connection until stopped."""

    def __init__(self, lease: Lease, *, on_lost: Any, on_cancel: Any) -> None:
        super().__init__(name=f"heartbeat-{lease.job_id}", daemon=True)
        self.lease = lease
        self.interval = max(lease.lease_seconds / 3.0, 0.05)
        self._stop_event = threading.Event()
        self._on_lost = on_lost
        self._on_cancel = on_cancel

    def beat(self) -> bool:
        """One heartbeat; False once the lease is gone."""
        try:
            result = lease_heartbeat(self.lease)
        except Exception:
            logger.exception("heartbeat failed", extra=self.lease.log_extra())
            close_old_connections()
            return True  # keep trying: the lease may still be ours until it expires
        if not result.alive:
            report_stale_write(self.lease, "heartbeat")
            self._on_lost()
            return False
        if result.cancel_requested:
            self._on_cancel()
        return True

    def run(self) -> None:
        try:
            while not self._stop_event.wait(self.interval):
                if not self.beat():
                    return
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=self.interval + 5)
