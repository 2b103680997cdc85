"""Leaving a lease: the one fenced exit every outcome of every path takes.

A leased job leaves its lease in exactly one of these ways, each a conditional write on
(id, generation, owner token, state='leased') with its JobEvent, committed together:
  - success (`job_complete`; a group commit's: jobs.completion.complete_many, or
    jobs.admission.complete_many_handing_over with keyed jobs): the database function
    jobs_complete_many (jobs/sql), then local effects and the admission hand-over
    (jobs.admission);
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

from . import admission, dispatch
from .completion import Completion, complete_many
from .effects import effect_apply_local
from .events import job_event_record
from .exceptions import LeaseLost
from .follow_ups import follow_ups_write
from .leases import Lease, fenced_transaction, job_update_if_leased, lease_lost, report_stale_write
from .models import QuarantineRecord
from .retry import Decision
from .rows import CheckedSubmit
from .states import JobState

logger = logging.getLogger(__name__)

LocalEffect = tuple[str, Callable[[str], Any]]


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


def job_complete(
    lease: Lease,
    *,
    result: dict[str, Any],
    local_effects: list[LocalEffect],
    follow_ups: list[CheckedSubmit] | None = None,
) -> None:
    """Success: result, state, local effects, event, successor and follow-ups (`ctx.submit`,
    written only once the fenced update applied) commit together, fenced.

    With nothing to commit beside the job's own row and event (no local effect, no follow-up,
    no admission rule to hand over, no caller's transaction), that is one round trip and one
    commit."""
    spec, keys = admission.handoff_keys(lease)
    alone = not local_effects and not follow_ups and not keys and not connection.in_atomic_block
    with fenced_transaction(lease, "complete", atomic=not alone):
        if keys and not local_effects:
            admission.complete_and_hand_over(lease, result, spec=spec, keys=keys)
        else:
            if lease.job_id not in complete_many([Completion(lease, result)]):
                raise lease_lost(lease)
            for name, fn in local_effects:
                effect_apply_local(lease, name, fn)
            if keys:
                admission.admission_handoff(lease, left_active=True)
        if follow_ups:
            follow_ups_write(lease, follow_ups)


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
        admission.admission_handoff(lease, left_active=exit.left_active)


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
