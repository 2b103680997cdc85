"""Leaving a lease: the one fenced exit every outcome of every path takes.

A leased job leaves its lease in exactly one of these ways, each a conditional write on
(id, generation, owner token, state='leased') with its JobEvent, committed together:
  - success (`job_complete`, batched: `complete_many`): the database function
    jobs_complete_many (jobs/sql), then local effects and the admission hand-over;
  - every other exit (`leave` with an `Exit`): retry (retry_wait plus an outbox row due at
    the backoff), quarantine (plus its QuarantineRecord), release (an incompatible worker or
    a batch's unstarted job: retry_wait without spending the attempt), cancel.
The single path (jobs.runtime), the batch path (jobs.batch) and the reaper all go through
here. Zero rows matched is LeaseLost: rolled back, counted and logged (leases.fenced_transaction).

The attempt: a one-job claim (jobs_claim) charged it already; a batch claim
(jobs_claim_many) did not, and `Lease.charged` says so. An exit writes `attempt` as the
number of the attempt that ran when the handler started, and one less when it did not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone

from . import dispatch, prepared, registry
from .effects import effect_apply_local
from .events import job_event_record
from .exceptions import LeaseLost
from .leases import Lease, fenced_transaction, job_update_if_leased, lease_lost, report_stale_write
from .models import Job, QuarantineRecord
from .retry import Decision
from .states import JobState

logger = logging.getLogger(__name__)

LocalEffect = tuple[str, Callable[[str], Any]]

# The one spelling of a completion (jobs/sql/jobs_complete_many.sql): many jobs, or one.
_COMPLETE_MANY_CALL = (
    "jobs_complete_many(%s::uuid[], %s::bigint[], %s::text, %s::int[], %s::jsonb[])"
)
_COMPLETE_MANY_SQL = f"SELECT * FROM {_COMPLETE_MANY_CALL}"
# A keyed completion: the completion, then the admission locks and the head of
# jobs_admission_lock, in one round trip. The lateral call's arguments depend on the
# completion's answer, so it runs after it: the job's row lock before the advisory locks,
# the order every other hand-over (cancel, quarantine) takes them in.
_COMPLETE_AND_LOCK_SQL = (
    f"SELECT c.ok, h.* FROM (SELECT count(*) > 0 AS ok FROM {_COMPLETE_MANY_CALL}) c "
    "LEFT JOIN LATERAL jobs_admission_lock("
    "CASE WHEN c.ok THEN %s::text[] ELSE '{}'::text[] END, "
    "CASE WHEN c.ok THEN %s::text END, %s::uuid) AS h ON true"
)


# Keyed completions of a group commit: completion, key locks and next heads in one call
# (jobs/sql/jobs_complete_many_hand_over.sql).
_COMPLETE_MANY_HAND_OVER_SQL = (
    "SELECT * FROM jobs_complete_many_hand_over("
    "%s::uuid[], %s::bigint[], %s::text, %s::int[], %s::jsonb[], %s::text[])"
)


@dataclass(frozen=True)
class Completion:
    """A finished handler's result, waiting for its (group) commit."""

    lease: Lease
    result: dict[str, Any]


@dataclass(frozen=True)
class Exit:
    """Any way out of a lease but success."""

    to_state: JobState
    reason: str
    where: str  # names the write in a stale-write report
    started: bool  # the handler started: the attempt counts
    fields: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    enqueue_at: datetime | None = None  # a new outbox message, due then
    quarantine: dict[str, Any] | None = None  # QuarantineRecord fields
    left_active: bool = True  # False: still active (a retry), hand over the caps only


def attempt_after(lease: Lease, *, started: bool) -> int | None:
    """What an exit writes to the attempt counter (None: leave it as the claim left it)."""
    if lease.charged:
        return None if started else lease.attempt - 1
    return lease.attempt if started else None


def _complete_params(completions: list[Completion]) -> list[Any]:
    field_ = Job._meta.get_field("result")
    return [
        [c.lease.job_id for c in completions],
        [c.lease.generation for c in completions],
        completions[0].lease.worker,
        [c.lease.attempt for c in completions],
        [field_.get_db_prep_value(c.result, connection) for c in completions],
    ]


def complete_many(completions: list[Completion]) -> set[UUID]:
    """leased -> succeeded for jobs of one owner token in one statement, each fenced by its
    own generation; returns the ids completed (a missing one lost its lease)."""
    if not completions:
        return set()
    rows = prepared.fetchall(_COMPLETE_MANY_SQL, _complete_params(completions))
    return {row["id"] for row in rows}


def _handoff_key(lease: Lease) -> str | None:
    """The lock a success of `lease` hands over in `complete_many_handing_over`: its key's
    (None: unkeyed). A keyed job with caps hands over through `job_complete`: ValueError."""
    if lease.serialization_key is None:
        return None
    key = dispatch.key_only_handoff(lease)
    if key is None:
        raise ValueError(f"{lease.kind}: a success with caps hands over through job_complete")
    return key


def complete_many_handing_over(completions: list[Completion]) -> set[UUID]:
    """`complete_many` for jobs some of which hold a serialization key (none with caps:
    `_handoff_key`): in the caller's transaction, one statement completes them all, takes
    the completed keys' locks and finds each key's next head; each head not leased gets its
    message (one INSERT for all). Returns the ids completed."""
    if not completions:
        return set()
    if not connection.in_atomic_block:
        raise RuntimeError("a keyed group completion runs inside the group commit's transaction")
    rows = prepared.fetchall(
        _COMPLETE_MANY_HAND_OVER_SQL,
        [*_complete_params(completions), [_handoff_key(c.lease) for c in completions]],
    )
    dispatch.next_heads_enqueue(
        [dispatch.head_of([row[f"next_{name}"] for name in dispatch.HEAD_FIELDS]) for row in rows]
    )
    return {row["id"] for row in rows}


def _complete_and_hand_over(
    lease: Lease, result: dict[str, Any], *, spec: registry.KindSpec | None, keys: list[str]
) -> None:
    row = prepared.fetchone(
        _COMPLETE_AND_LOCK_SQL,
        [
            *_complete_params([Completion(lease, result)]),
            keys,
            lease.serialization_key,
            lease.job_id,
        ],
    )
    if not row or not row[0]:
        raise lease_lost(lease)
    dispatch.hand_over(
        job_id=lease.job_id,
        kind=lease.kind,
        tenant_id=lease.tenant_id,
        spec=spec,
        head=dispatch.head_of(row[1:]),
    )


def job_complete(lease: Lease, *, result: dict[str, Any], local_effects: list[LocalEffect]) -> None:
    """Success: result, state, local effects, event and successor commit together, fenced.

    With nothing to commit beside the job's own row and event (no local effect, no admission
    rule to hand over, no caller's transaction), that is one round trip and one commit."""
    spec, keys = dispatch.handoff_keys(
        kind=lease.kind,
        kind_version=lease.kind_version,
        tenant_id=lease.tenant_id,
        serialization_key=lease.serialization_key,
    )
    alone = not local_effects and not keys and not connection.in_atomic_block
    with fenced_transaction(lease, "complete", atomic=not alone):
        if keys and not local_effects:
            _complete_and_hand_over(lease, result, spec=spec, keys=keys)
            return
        if lease.job_id not in complete_many([Completion(lease, result)]):
            raise lease_lost(lease)
        for name, fn in local_effects:
            effect_apply_local(lease, name, fn)
        if keys:
            dispatch.admission_handoff_lease(lease, left_active=True)


def leave(lease: Lease, exit: Exit) -> None:
    """Take `exit` out of the lease, fenced, in one transaction (or the caller's)."""
    with fenced_transaction(lease, exit.where):
        now = timezone.now()
        fields = {**exit.fields, "state": exit.to_state.value, "updated_at": now}
        attempt = attempt_after(lease, started=exit.started)
        if attempt is not None:
            fields["attempt"] = attempt
        job_update_if_leased(lease, **fields)
        job_event_record(
            lease,
            from_state=JobState.LEASED.value,
            to_state=exit.to_state.value,
            reason=exit.reason,
            worker=lease.worker,
            details=exit.details,
            attempt=lease.attempt if exit.started else lease.attempt - 1,
        )
        if exit.quarantine is not None:
            QuarantineRecord.objects.create(job_id=lease.job_id, **exit.quarantine)
        if exit.enqueue_at is not None:
            dispatch.job_enqueue_execute(lease, available_at=exit.enqueue_at)
        dispatch.admission_handoff_lease(lease, left_active=exit.left_active)


def leave_in_savepoint(lease: Lease, exit: Exit) -> bool:
    """`leave` inside a group commit: a lost lease rolls back this job's writes only."""
    try:
        with transaction.atomic():
            leave(lease, exit)
    except LeaseLost:
        return False
    return True


# The exits, by name.


def retry_exit(
    lease: Lease, *, decision: Decision, error_message: str, error_details: dict[str, Any] | None
) -> Exit:
    """Durable retry: retry_wait with next_attempt_at plus an outbox row due then."""
    due = timezone.now() + timedelta(seconds=decision.delay)
    return Exit(
        to_state=JobState.RETRY_WAIT,
        reason=decision.reason,
        where="retry",
        started=True,
        fields={
            "next_attempt_at": due,
            "error_category": decision.category.value,
            "error_message": error_message[:2000],
        },
        details={
            **decision.as_details(),
            "next_attempt_at": due.isoformat(),
            **(error_details or {}),
        },
        enqueue_at=due,
        left_active=False,
    )


def quarantine_exit(
    lease: Lease,
    *,
    decision: Decision,
    error_message: str,
    responsible: str,
    error_details: dict[str, Any] | None,
) -> Exit:
    """Stop for an operator, with a QuarantineRecord that carries no payload."""
    return Exit(
        to_state=JobState.QUARANTINED,
        reason=decision.reason,
        where="quarantine",
        started=True,
        fields={"error_category": decision.error_category, "error_message": error_message[:2000]},
        details={**decision.as_details(), **(error_details or {})},
        quarantine={
            "kind": lease.kind,
            "reason": decision.reason[:500],
            "category": decision.category.value,
            "input_version": lease.input_version,
            # The attempt that ran: charged at the claim (jobs_claim) or by this exit.
            "attempts": lease.attempt,
            "generation": lease.generation,
            "last_attempt_at": lease.claimed_at,
            "responsible": responsible,
        },
    )


def release_exit(lease: Lease, *, delay: float, reason: str, decision: str) -> Exit:
    """Give the job back without spending an attempt: its handler never started."""
    due = timezone.now() + timedelta(seconds=delay)
    return Exit(
        to_state=JobState.RETRY_WAIT,
        reason=reason,
        where="release",
        started=False,
        fields={"next_attempt_at": due},
        details={"decision": decision, "delay_seconds": delay},
        enqueue_at=due,
        left_active=False,  # its lease slot is free, as after a retry
    )


def cancel_exit(reason: str, *, started: bool) -> Exit:
    """A cancel request honoured: the job ends cancelled."""
    return Exit(
        to_state=JobState.CANCELLED,
        reason=reason,
        where="cancel",
        started=started,
        fields={
            "finished_at": timezone.now(),
            "error_category": "cancelled",
            "error_message": reason,
        },
    )


# The services the single path, the reaper and operators call.


def job_retry_schedule(
    lease: Lease,
    *,
    decision: Decision,
    error_message: str,
    error_details: dict[str, Any] | None = None,
) -> None:
    """Durable retry: retry_wait with next_attempt_at plus an outbox row due at that time.
    `error_details` (the exception's class and traceback) go into the event."""
    leave(
        lease,
        retry_exit(
            lease, decision=decision, error_message=error_message, error_details=error_details
        ),
    )


def job_quarantine(
    lease: Lease,
    *,
    decision: Decision,
    error_message: str,
    responsible: str,
    error_details: dict[str, Any] | None = None,
) -> None:
    """Stop for an operator: quarantined, with a record that carries no payload."""
    leave(
        lease,
        quarantine_exit(
            lease,
            decision=decision,
            error_message=error_message,
            responsible=responsible,
            error_details=error_details,
        ),
    )


def job_release_incompatible(lease: Lease, *, delay: float) -> None:
    """This worker cannot run the job's kind version: give it back without spending an attempt."""
    leave(
        lease,
        release_exit(
            lease,
            delay=delay,
            reason=f"incompatible deployment: no handler for {lease.kind} v{lease.kind_version}",
            decision="release",
        ),
    )


def job_cancel_finish(lease: Lease, *, reason: str, started: bool = True) -> None:
    """A leased job stopped after a cancel request: it ends cancelled, fenced."""
    leave(lease, cancel_exit(reason, started=started))


def report_stale_completions(completions: list[Completion], applied: set[UUID]) -> list[Lease]:
    """Count and log each completion a group commit found fenced out; returns their leases."""
    lost = [c.lease for c in completions if c.lease.job_id not in applied]
    for lease in lost:
        report_stale_write(lease, "complete")
    return lost
