"""`execute(job_id)`: the fenced worker protocol behind the `jobs.execute` Celery task.

1-2. Claim it (jobs.leases, one database call that also returns the input). Finished
   (terminal or quarantined) or a live lease elsewhere: a duplicate delivery; not due yet, or
   not its turn: ack and stop; the owner, the reaper or the outbox covers it.
3. A heartbeat thread extends the lease every lease/3; a lost lease makes ctx.cancelled
   true and every later fenced write raise LeaseLost.
4. Run the handler. 5. Commit the outcome (success, scheduled retry, quarantine) in one
   transaction fenced by the generation. 6. Return, and only then Celery acks the message
   (acks_late). A crash before 5 leaves a leased job: redelivery or the reaper recovers it,
   and the effect ledger keeps external effects single. A crash between 5 and 6 redelivers a
   message for a finished job: step 1 acknowledges it without running anything.
"""

from __future__ import annotations

import logging
import random
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

# billiard >= 4.3 (celery 5.7 requires it); the stubs of celery-types predate it.
from billiard.common import terminate_handler_fired  # type: ignore[attr-defined,unused-ignore]
from celery.exceptions import WorkerShutdown, WorkerTerminate
from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from . import dispatch, lifecycle, registry, services, tracing
from .claims import Claim, ClaimStatus, job_claim_id
from .completion import Completion
from .context import JobContext
from .counters import (
    DEFERRED_DELIVERIES,
    DUPLICATE_DELIVERIES,
    INCOMPATIBLE_DEPLOYMENT,
    counter_increment,
)
from .exceptions import LeaseLost
from .failpoints import failpoint
from .gate import database_failed, database_unreachable, retried_when_refused
from .identity import lease_owner_token
from .leases import Heartbeat, Lease
from .logging import job_log_context
from .outcomes import Outcome
from .retry import Action, Category, Decision, classify, decide, failure_summary
from .rows import CheckedSubmit

logger = logging.getLogger(__name__)

INCOMPATIBLE_RETRY_DELAY = 30.0
TRACEBACK_CHARS = 8000  # the tail of a failure's traceback kept in its JobEvent
_rng = random.SystemRandom()


@dataclass(frozen=True)
class ExecutionReport:
    outcome: Outcome
    job_id: str
    generation: int | None = None


def _miss(claim: Claim) -> Outcome:
    """Why a claim found nothing: a live lease elsewhere or a finished job is a duplicate
    delivery; an early message re-arms the job's wake-up; a job waiting for its turn is
    handed over later (or an expired lease out of budget goes to the reaper)."""
    if claim.status in (ClaimStatus.FINISHED, ClaimStatus.BUSY):
        counter_increment(DUPLICATE_DELIVERIES)
        logger.info("duplicate delivery", extra={"job_id": str(claim.job_id)})
        return Outcome.DUPLICATE
    if claim.status is ClaimStatus.EARLY:
        services.job_rearm_if_early(job_id=claim.job_id)
    counter_increment(DEFERRED_DELIVERIES)
    return Outcome.DEFERRED


def execute(
    job_id: UUID | str,
    *,
    worker: str | None = None,
    kind: str | None = None,
    kind_version: int | None = None,
    hints: Mapping[str, Any] | None = None,
) -> ExecutionReport:
    """Run one delivery of `job_id` through the fenced protocol (module docstring).

    `kind` and `kind_version` are the message's hint (one round trip for the claim); `hints`
    the message's others (its trace context: jobs.tracing). Every line logged meanwhile names
    the job (jobs.logging.JobContextFilter)."""
    with job_log_context(job_id=str(job_id)), tracing.job_delivery(job_id, hints):
        return _deliver(
            job_id, owner=worker or lease_owner_token(), kind=kind, kind_version=kind_version
        )


def claim_reconnecting[T](claim: Callable[[], T]) -> T:
    """A claim, once more on a fresh connection if the connection broke since the last task
    (a database restart while the per-task health check was skipped: jobs.celery_hooks)."""
    try:
        return claim()
    except (InterfaceError, OperationalError) as exc:
        if not database_unreachable(exc):
            raise  # the server answered about the statement: a fresh connection changes nothing
        logger.warning("claim failed on a broken connection; retrying once")
        connection.close()
        return claim()


def _deliver(
    job_id: UUID | str, *, owner: str, kind: str | None, kind_version: int | None
) -> ExecutionReport:
    claim = tracing.traced(
        "jobs.claim",
        lambda: claim_reconnecting(
            lambda: job_claim_id(job_id, worker=owner, kind=kind, kind_version=kind_version)
        ),
        job_id=job_id,
        about=tracing.claim_attributes,
    )
    if claim.status is ClaimStatus.MISSING:
        logger.error("delivery for unknown job", extra={"job_id": str(job_id)})
        return ExecutionReport(Outcome.MISSING, str(claim.job_id))
    lease = claim.lease
    if lease is None:
        return ExecutionReport(_miss(claim), str(claim.job_id))
    with job_log_context(**lease.log_extra()):
        return _execute_leased(claim, lease)


def _execute_leased(claim: Claim, lease: Lease) -> ExecutionReport:
    failpoint("worker.after_claim")
    spec = registry.kind_version(lease.kind, lease.kind_version)
    if spec is None:
        counter_increment(INCOMPATIBLE_DEPLOYMENT, label=f"{lease.kind}:v{lease.kind_version}")
        lifecycle.job_release_incompatible(lease, delay=INCOMPATIBLE_RETRY_DELAY)
        return ExecutionReport(Outcome.INCOMPATIBLE, str(lease.job_id), lease.generation)
    try:
        outcome = tracing.traced(
            "jobs.run",
            lambda: _run_leased(claim, lease, spec),
            lease=lease,
            about=tracing.outcome_attributes,
        )
    except LeaseLost:
        logger.warning("lease lost; outcome discarded", extra=lease.log_extra())
        dispatch.send_again_if_claim_lost([lease])
        outcome = Outcome.STALE
    if outcome is not Outcome.STALE:
        failpoint("worker.after_complete_before_ack")
        after_outcome(spec, lease, outcome)
    return ExecutionReport(outcome, str(lease.job_id), lease.generation)


def after_outcome(spec: registry.KindSpec, lease: Lease, outcome: Outcome) -> None:
    """The kind's hook once the outcome committed; a failing hook never fails the delivery."""
    if spec.on_outcome is None:
        return
    try:
        spec.on_outcome(lease, outcome)
    except Exception:
        logger.exception("the kind's on_outcome hook failed", extra=lease.log_extra())


@dataclass(frozen=True)
class Verdict:
    """What a handler's run comes to, before anything is written: a completion, another
    exit, or STALE (the lease was lost: nothing may be written)."""

    outcome: Outcome
    exit: lifecycle.Exit | None = None
    completion: Completion | None = None
    local_effects: tuple[lifecycle.LocalEffect, ...] = ()
    follow_ups: tuple[CheckedSubmit, ...] = ()  # ctx.submit's, written with the success
    log: str = ""


# Raised to stop the worker itself (Celery's warm and cold shutdown, Ctrl-C, a generator closed
# under the handler): never the job's failure. Both Celery exceptions are SystemExits.
_WORKER_STOPS: tuple[type[BaseException], ...] = (
    WorkerShutdown,
    WorkerTerminate,
    KeyboardInterrupt,
    GeneratorExit,
)


def stops_the_worker(error: BaseException) -> bool:
    """Whether `error` is the worker's own shutdown, which must unwind the process, rather
    than the job's failure (a handler's `sys.exit()`, any other exception).

    In a prefork pool process, billiard's terminate-signal handler raises a plain SystemExit
    after setting its flag; whatever arrives once the flag is set is that shutdown."""
    return isinstance(error, _WORKER_STOPS) or terminate_handler_fired()


def call_handler(
    spec: registry.KindSpec, ctx: JobContext, job_input: Any
) -> tuple[Any, BaseException | None]:
    """Validate the input and run the handler: (result, None) or (None, the error).

    A handler's SystemExit (or another BaseException of its own) is its error like any
    other: Celery's pool would let it end the process. The worker's own shutdown and
    LeaseLost propagate: nothing of this attempt may be written."""
    try:
        spec.validate(job_input)
        return ctx.run(spec.fn, job_input), None  # and its last progress written
    except LeaseLost:
        raise
    except BaseException as exc:
        if stops_the_worker(exc):
            raise
        return None, exc


def judge(
    lease: Lease,
    spec: registry.KindSpec,
    ctx: JobContext,
    result: Any,
    error: BaseException | None,
) -> Verdict:
    """Decide the outcome of a run (success, retry, quarantine, cancel, stale). A run told to
    stop because its lease was in doubt writes nothing: the lease expires, the reaper gives
    the job to another worker."""
    if ctx.lease_lost or ctx.doubt_seen:
        return Verdict(Outcome.STALE)
    if ctx.cancel_requested:
        exit = lifecycle.cancel_exit("cancelled while running", started=True)
        return Verdict(Outcome.CANCELLED, exit=exit)
    if error is None and not isinstance(result, dict):
        error = TypeError(f"handler returned {type(result).__name__}, not dict")
    if error is not None:
        return failure_verdict(lease, spec, error)
    return Verdict(
        Outcome.SUCCEEDED,
        completion=Completion(lease, result),
        local_effects=tuple(ctx.local_effects),
        follow_ups=tuple(ctx.follow_ups),
    )


def _run_leased(claim: Claim, lease: Lease, spec: registry.KindSpec) -> Outcome:
    if claim.cancel_requested:
        # Taken over after its owner died with a cancel request pending: honour it, run nothing.
        lifecycle.job_cancel_finish(
            lease, reason="cancelled before this attempt started", started=False
        )
        return Outcome.CANCELLED
    ctx = JobContext(lease, extended_at=claim.sent_at)
    heartbeat = Heartbeat(
        lease,
        on_lost=ctx.mark_lost,
        on_cancel=ctx.mark_cancel_requested,
        on_extended=ctx.mark_extended,
    )
    heartbeat.start()
    try:
        result, error = call_handler(spec, ctx, claim.input)
    finally:
        heartbeat.stop()
    verdict = judge(lease, spec, ctx, result, error)
    if verdict.outcome is Outcome.STALE:
        raise LeaseLost(f"job {lease.job_id}: lease lost while running")
    if verdict.completion is not None:
        failpoint("worker.after_effect_before_complete")
        completion, done = verdict.completion, verdict
        verdict = tracing.traced(
            "jobs.complete",
            lambda: _complete(spec, completion, done),
            lease=lease,
            about=tracing.outcome_attributes,
        )
    if verdict.exit is not None:
        exit, left = verdict.exit, verdict
        tracing.traced(
            "jobs.complete",
            lambda: retried_when_refused(
                lambda: lifecycle.leave(lease, exit), what=f"the {exit.where}"
            ),
            lease=lease,
            about=lambda _: tracing.outcome_attributes(left),
        )
    log_verdict(lease, verdict)
    return verdict.outcome


def _complete(spec: registry.KindSpec, completion: Completion, verdict: Verdict) -> Verdict:
    """Commit a success. A local effect (or a follow-up's write) that raises rolls the
    completion back and fails the job as if its handler had raised (as in a batch's group
    commit): the failure's verdict."""
    lease, local_effects = completion.lease, list(verdict.local_effects)
    follow_ups = list(verdict.follow_ups)
    try:
        retried_when_refused(
            lambda: lifecycle.job_complete(
                lease, result=completion.result, local_effects=local_effects, follow_ups=follow_ups
            ),
            what="the completion",
        )
    except LeaseLost:
        raise
    except BaseException as exc:
        if not (local_effects or follow_ups) or stops_the_worker(exc) or database_failed(exc):
            raise
        return failure_verdict(lease, spec, exc)
    return verdict


def log_verdict(lease: Lease, verdict: Verdict) -> None:
    if verdict.outcome is Outcome.SUCCEEDED:
        logger.info("job succeeded", extra=lease.log_extra())
    elif verdict.outcome is Outcome.RETRY_SCHEDULED:
        logger.info(verdict.log, extra=lease.log_extra())
    elif verdict.log:
        logger.warning(verdict.log, extra=lease.log_extra())


def failure_verdict(lease: Lease, spec: registry.KindSpec, error: BaseException) -> Verdict:
    """A failed run: a retry within the budgets, else quarantine."""
    category, label = classify(error)
    decision: Decision = decide(
        category=category,
        label=label,
        attempt=lease.attempt,
        policy=spec.policy,
        deadline=lease.deadline,
        now=timezone.now(),
        rng=_rng,
        summary=failure_summary(error),
    )
    message = f"{type(error).__name__}: {error}"
    details = _error_details(error)
    what = f"{category.value} {type(error).__name__}"
    if decision.action is Action.RETRY:
        exit = lifecycle.retry_exit(
            lease, decision=decision, error_message=message, error_details=details
        )
        log = f"job failed ({what}); retry scheduled in {decision.delay:.2f}s"
        return Verdict(Outcome.RETRY_SCHEDULED, exit=exit, log=log)
    exit = lifecycle.quarantine_exit(
        lease,
        decision=decision,
        error_message=message,
        responsible=spec.responsible,
        error_details=details,
    )
    return Verdict(
        Outcome.QUARANTINED, exit=exit, log=f"job quarantined ({what}): {decision.reason}"
    )


def _error_details(error: BaseException) -> dict[str, str]:
    """What the failure event keeps for operators and `django.tasks` results: the
    exception's class path and (the tail of) its traceback."""
    cls = type(error)
    return {
        "exception_class": f"{cls.__module__}.{cls.__qualname__}",
        "traceback": "".join(traceback.format_exception(error))[-TRACEBACK_CHARS:],
    }


__all__ = ["Category", "ExecutionReport", "Outcome", "execute"]
