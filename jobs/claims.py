"""Claims: taking the leases of jobs by id, of one job or a batch message's (`claim_rows`, the
database function `jobs_claim_many`), and reading their rows.

Claim protocol of one job (`job_claim_id`): one call of `jobs_claim_many` with the full rules
(jobs/sql/jobs_claim_many.sql), one transaction:
  1. Lock the row if it is claimable now: due `queued`/`retry_wait`, or `leased` with an expired
     lease; for a serialization key, only its head while no other job of it is leased; within the
     tenant's and kind's concurrency caps. SKIP LOCKED: a concurrent claimer wins, we miss.
  2. UPDATE it to `leased` with generation+1, attempt+1, our owner token and a lease on the
     database clock; insert the JobEvent; return the input; commit. A crash after the commit
     leaves a leased job whose lease expires: the reaper moves it to retry_wait (the attempt
     counts) and re-enqueues it.
Why the claim's commit may skip the WAL flush, and how every later write is fenced: jobs.leases.
Split from jobs.leases so that leases (the fence, heartbeats) stay below the kind registry:
a claim looks up the kind's lease length and caps; the fence never needs to.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connection, transaction

from . import prepared, registry
from .conf import jobs_settings
from .leases import Lease
from .models import Job


class ClaimStatus(StrEnum):
    """What a one-job claim answered (jobs/sql/jobs_claim_many.sql; a batch's claim answers
    claimed, missing, finished or 'other')."""

    CLAIMED = "claimed"
    MISSING = "missing"
    FINISHED = "finished"  # terminal or quarantined: a duplicate delivery
    BUSY = "busy"  # a live lease elsewhere: a duplicate delivery
    EARLY = "early"  # not due yet
    WAITING = "waiting"  # not its turn (key, caps), a concurrent claimer, or out of budget
    MISMATCH = "mismatch"  # the kind guessed by the caller was wrong


@dataclass(frozen=True)
class Claim:
    """The answer of one claim attempt; `lease` and `input` only when CLAIMED."""

    status: ClaimStatus
    job_id: UUID
    kind: str | None = None
    kind_version: int | None = None
    lease: Lease | None = None
    input: Any = None
    cancel_requested: bool = False
    # When the claim statement was sent (time.monotonic()): the lease runs from then at the
    # latest, by this worker's clock (jobs.context.JobContext.lease_in_doubt).
    sent_at: float | None = None


_CLAIM_SQL = (
    "SELECT * FROM jobs_claim_many(%s::uuid[], %s::text[], %s::int[], %s::float8[], %s::text, "
    "%s::boolean, %s::int, %s::int)"
)

# One job to claim: (id, the kind and version its message names, the lease's length).
ClaimItem = tuple[UUID, str | None, int | None, float]


def claim_rows(
    items: Sequence[ClaimItem],
    *,
    worker: str,
    charge: bool,
    tenant_limit: int | None = None,
    kind_limit: int | None = None,
) -> tuple[list[dict[str, Any]] | None, float]:
    """The claim of one job or many: one call of `jobs_claim_many` (jobs/sql/jobs_claim_many.sql).

    `charge`: the full rules of a one-job claim (the attempt charged, an expired lease taken
    over, the caps `tenant_limit` and `kind_limit`: one item then); else a batch's rules.
    Answers (one row per item, by column name: the claimed ones first, each group in the
    items' order; None when the partial unique index jobs_job_one_leased_per_serialization_key
    refused the statement: another job of a key got leased meanwhile), and when the statement
    was sent (time.monotonic(): the leases run from then at the latest, by this worker's clock).
    """
    params = [
        [item[0] for item in items],
        [item[1] for item in items],
        [item[2] for item in items],
        # float: a kind may name its lease as an int, and psycopg refuses mixed lists.
        [float(item[3]) for item in items],
        worker,
        charge,
        tenant_limit,
        kind_limit,
    ]
    # Inside a caller's transaction a refused claim must not poison it: use a savepoint.
    scope = transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext()
    sent_at = time.monotonic()
    try:
        with scope:
            return prepared.fetchall(_CLAIM_SQL, params), sent_at
    except IntegrityError:
        return None, sent_at


def _claim_once(
    job_id: UUID,
    *,
    worker: str,
    kind: str | None,
    kind_version: int | None,
    lease_seconds: float | None,
) -> Claim:
    spec = registry.kind_version(kind, kind_version) if kind and kind_version else None
    if lease_seconds is None:
        lease_seconds = spec.lease_seconds if spec else jobs_settings.DEFAULT_LEASE_SECONDS
    rows, sent_at = claim_rows(
        [(job_id, kind, kind_version, lease_seconds)],
        worker=worker,
        charge=True,
        tenant_limit=spec.tenant_limit if spec else None,
        kind_limit=spec.kind_limit if spec else None,
    )
    if rows is None:  # jobs_job_one_leased_per_serialization_key: another job of the key has it
        return Claim(ClaimStatus.WAITING, job_id, kind, kind_version)
    if not rows:
        raise RuntimeError("jobs_claim_many returned no row")
    row = rows[0]
    status = ClaimStatus(row["status"])
    if status is not ClaimStatus.CLAIMED:
        return Claim(status, job_id, row["kind"], row["kind_version"])
    lease = lease_from_row(job_id, row, worker=worker, lease_seconds=lease_seconds, charged=True)
    return Claim(
        status,
        job_id,
        row["kind"],
        row["kind_version"],
        lease,
        json_value(row["input"]),
        bool(row["cancel_requested"]),
        sent_at,
    )


def json_value(value: Any) -> Any:
    """A jsonb column as Python (Django's backend hands jsonb over as text: Job.input has no
    custom decoder)."""
    return json.loads(value) if isinstance(value, str) else value


def lease_from_row(
    job_id: UUID, row: dict[str, Any], *, worker: str, lease_seconds: float, charged: bool
) -> Lease:
    """The Lease a claimed row of `claim_rows` describes, by name."""
    return Lease.from_row(
        job_id,
        row,
        worker=worker,
        lease_seconds=lease_seconds,
        previous_state=row["previous_state"],
        claimed_at=row["claimed_at"],
        charged=charged,
    )


def job_claim_id(
    job_id: UUID | str,
    *,
    worker: str,
    kind: str | None = None,
    kind_version: int | None = None,
    lease_seconds: float | None = None,
) -> Claim:
    """Take the lease of a job by id: one round trip when the caller knows its kind.

    A message carries the job's kind and version as a hint; without it (or when it is wrong)
    the database answers MISMATCH with the real kind and the claim is made again with it. A
    kind version this worker does not know is still claimed (with the default lease) so the
    caller can give it back without spending an attempt. `lease_seconds` overrides the kind's.
    """
    job_id = job_id if isinstance(job_id, UUID) else UUID(str(job_id))
    claim = _claim_once(
        job_id, worker=worker, kind=kind, kind_version=kind_version, lease_seconds=lease_seconds
    )
    if claim.status is ClaimStatus.MISMATCH:
        claim = _claim_once(
            job_id,
            worker=worker,
            kind=claim.kind,
            kind_version=claim.kind_version,
            lease_seconds=lease_seconds,
        )
    return claim


def job_claim(job: Job, *, worker: str, lease_seconds: float | None = None) -> Lease | None:
    """Take the lease of `job`; None when it is not ours to run now."""
    return job_claim_id(
        job.pk,
        worker=worker,
        kind=job.kind,
        kind_version=job.kind_version,
        lease_seconds=lease_seconds,
    ).lease
