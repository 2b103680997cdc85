"""`execute_many(items)`: the batch path behind the `jobs.execute_many` Celery task.

A batch message carries several jobs (the relay packs them under backlog; jobs.dispatch
says which kinds may share one). For one message:
  1. Claim every plain job with ONE statement (database function jobs_claim_many): a lease,
     generation + 1 and a `leased` event each; no attempt is charged yet. A keyed job is
     plain when it is the head of its key (no older active job of the key, none leased).
     Jobs that need the full rules (not a key's head, caps, an expired lease, a kind this
     worker lacks) are left for step 5. Finished jobs are duplicate deliveries.
  2. One heartbeat keeps every lease of the batch alive (one statement per beat) until the
     group commit; a lease found gone marks only its own job's context lost.
  3. Run the handlers one after the other, each with its own JobContext (fence, effects,
     log fields). Once `JOBS_BATCH_BUDGET_SECONDS` have passed, the jobs not started yet are
     released (retry_wait, due now, attempt not charged) instead of run: a batch never holds
     work much longer than one handler's run past its budget.
  4. Group commit: one transaction holds every outcome. Plain successes go in ONE fenced
     statement (jobs_complete_many), which also charges their attempt; with keyed ones
     among them, the same statement also takes their keys' locks and finds each key's next
     head (jobs_complete_many_hand_over), whose messages go in one INSERT. Every other exit
     (retry, quarantine, cancel, release, local effects, follow-ups written with their
     parent's success, a success with caps to hand over) is one savepoint each, so one
     job's lost lease rolls back that job's writes only.
     Then the task returns and Celery acks the message (acks_late): never before every
     outcome it carries committed.
  5. The jobs left aside run through the one-job path (jobs.runtime), each claimed, run and
     committed on its own, before the message is acked; once the budget is spent, each of
     them gets a message of its own instead (`dispatch.send_again`).
Crash windows (docs/failure-modes.md): a kill in 1-4 leaves leased jobs with nothing
charged; the message is redelivered (reject_on_worker_lost) and finds them busy, and the
reaper gives them back uncharged once the leases expire, marked lease_expired: from then on
each runs alone through the one-job claim, charged, so a job that kills its process spends its
own attempts and no sibling's. A kill after 4 redelivers a message whose jobs are finished.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import transaction

from outbox.services import outbox_publish_together

from . import admission, dispatch, lifecycle, registry, runtime, tracing
from .claims import claim_rows, json_value, lease_from_row
from .completion import complete_many
from .conf import jobs_settings
from .context import JobContext
from .counters import DUPLICATE_DELIVERIES, counter_increment
from .exceptions import LeaseLost
from .failpoints import failpoint
from .gate import database_failed, retried_when_refused
from .identity import lease_owner_token
from .leases import BatchHeartbeat, Lease, Member
from .logging import job_log_context
from .outcomes import Outcome
from .runtime import ExecutionReport, Verdict

logger = logging.getLogger(__name__)


@dataclass
class Claimed:
    """One job of the batch under our lease, and what became of it."""

    lease: Lease
    spec: registry.KindSpec
    input: Any
    ctx: JobContext
    verdict: Verdict | None = None


def claim_many(
    items: list[tuple[UUID, registry.KindSpec]], *, worker: str
) -> tuple[list[Claimed], list[UUID], list[UUID]]:
    """Step 1: (claimed jobs, duplicates, jobs for the one-job path), in one statement."""
    if not items:
        return [], [], []
    # A key's head claimed here while another job of the key got leased meanwhile breaks
    # jobs_job_one_leased_per_serialization_key: the statement claims nothing, and every
    # job goes to the one-job path, which answers that race job by job.
    rows, sent_at = claim_rows(
        [(job_id, spec.kind, spec.version, spec.lease_seconds) for job_id, spec in items],
        worker=worker,
        charge=False,
    )
    if rows is None:
        logger.info("batch claim refused by a serialization key; claiming one by one")
        return [], [], [job_id for job_id, _ in items]
    specs = dict(items)
    claimed: list[Claimed] = []
    duplicates: list[UUID] = []
    others: list[UUID] = []
    for row in rows:
        job_id = row["id"]
        if row["status"] == "claimed":
            spec = specs[job_id]
            lease = lease_from_row(
                job_id, row, worker=worker, lease_seconds=float(spec.lease_seconds), charged=False
            )
            ctx = JobContext(lease, extended_at=sent_at)
            if row["cancel_requested"]:
                ctx.mark_cancel_requested()  # honoured before the handler starts (_run)
            claimed.append(Claimed(lease, spec, json_value(row["input"]), ctx))
        elif row["status"] == "finished":
            duplicates.append(job_id)
        else:
            others.append(job_id)  # the one-job path answers (a missing job: MISSING)
    return claimed, duplicates, others


def _run(job: Claimed, *, budget_left: bool) -> Verdict:
    """Step 3 for one job: its verdict, nothing written yet."""
    lease = job.lease
    if not budget_left:
        exit = lifecycle.release_exit(
            lease, delay=0.0, reason="released unstarted: batch budget spent", decision="release"
        )
        return Verdict(Outcome.DEFERRED, exit=exit)
    if job.ctx.cancel_requested:
        # Given back with a cancel request pending: honour it, run nothing (as jobs.runtime).
        exit = lifecycle.cancel_exit("cancelled before this attempt started", started=False)
        return Verdict(Outcome.CANCELLED, exit=exit)
    with job_log_context(**lease.log_extra()):
        try:
            result, error = runtime.call_handler(job.spec, job.ctx, job.input)
        except LeaseLost:
            return Verdict(Outcome.STALE)
        return runtime.judge(lease, job.spec, job.ctx, result, error)


def run_claimed(jobs: list[Claimed]) -> None:
    """Steps 2-3: every handler under one batch heartbeat."""
    heartbeat = BatchHeartbeat(
        [
            Member(j.lease, j.ctx.mark_lost, j.ctx.mark_cancel_requested, j.ctx.mark_extended)
            for j in jobs
        ]
    )
    heartbeat.start()
    started = time.monotonic()
    budget = jobs_settings.BATCH_BUDGET_SECONDS
    try:
        for index, job in enumerate(jobs):
            budget_left = index == 0 or time.monotonic() - started < budget
            job.verdict = tracing.traced(
                "jobs.run",
                functools.partial(_run, job, budget_left=budget_left),
                lease=job.lease,
                about=tracing.outcome_attributes,
            )
    finally:
        heartbeat.stop()


def _in_one_statement(job: Claimed) -> bool:
    """A success with nothing to commit beside its row, its event and, for a keyed job,
    its key's hand-over (no local effect, no follow-up, no cap to hand over)."""
    verdict, lease = job.verdict, job.lease
    if not verdict or not verdict.completion or verdict.local_effects or verdict.follow_ups:
        return False
    return lease.serialization_key is None or admission.key_only_handoff(lease) is not None


def group_commit(jobs: list[Claimed]) -> None:
    """Step 4: every outcome in one transaction (plain successes only: in one statement, which
    is atomic by itself); a lost lease fails only its own job."""
    plain = [j for j in jobs if _in_one_statement(j)]
    in_plain = {id(j) for j in plain}
    keyed = any(j.lease.serialization_key is not None for j in plain)
    others = [
        j
        for j in jobs
        if j.verdict is not None
        and j.verdict.outcome is not Outcome.STALE
        and id(j) not in in_plain
    ]
    completions = [j.verdict.completion for j in plain if j.verdict and j.verdict.completion]
    if not others and not keyed:
        # Plain successes only: one statement, atomic on its own. No transaction around it,
        # whose BEGIN and COMMIT would be a round trip each (on a 1 ms link, most of a batch's).
        applied = complete_many(completions)
    else:
        # Retries, releases and next heads scheduled here leave in batch messages after the
        # commit.
        with outbox_publish_together(), transaction.atomic():
            for job in others:
                verdict = job.verdict
                if verdict is not None and not _commit_one(job, verdict):
                    job.verdict = Verdict(Outcome.STALE)
            if keyed:
                applied = admission.complete_many_handing_over(completions)
            else:
                applied = complete_many(completions)
    for job in plain:
        if job.lease.job_id not in applied:
            job.verdict = Verdict(Outcome.STALE)
    lifecycle.report_stale_completions(completions, applied)


def _commit_one(job: Claimed, verdict: Verdict) -> bool:
    """A savepoint of the group commit for an exit or a completion with local effects or
    follow-ups (written only if its fenced update applied)."""
    if verdict.exit is not None:
        return lifecycle.leave_in_savepoint(job.lease, verdict.exit)
    if verdict.completion is None:
        return True
    try:
        lifecycle.job_complete(
            job.lease,
            result=verdict.completion.result,
            local_effects=list(verdict.local_effects),
            follow_ups=list(verdict.follow_ups),
        )
    except LeaseLost:
        return False
    except BaseException as exc:
        if runtime.stops_the_worker(exc) or database_failed(exc):
            raise  # the whole group commit is retried or its message requeued
        # A local effect failed (a sys.exit() in one too): its savepoint rolled back; this
        # job fails as if its handler had raised (retry or quarantine), its siblings commit.
        failed = runtime.failure_verdict(job.lease, job.spec, exc)
        job.verdict = failed
        return failed.exit is not None and lifecycle.leave_in_savepoint(job.lease, failed.exit)
    return True


_LOST = Verdict(Outcome.STALE)  # a job whose run left no verdict: its lease was lost


def _job_id(item: Any) -> UUID | None:
    """An item's job id; None (logged) for an item no relay of ours writes."""
    try:
        return UUID(str(item["job_id"]))
    except (KeyError, TypeError, ValueError):
        logger.error("batch item without a valid job_id skipped", extra={"item": repr(item)[:200]})
        return None


def execute_many(
    items: list[dict[str, Any]], *, worker: str | None = None
) -> list[ExecutionReport]:
    """Deliver the jobs of one batch message (module docstring); returns one report each."""
    owner = worker or lease_owner_token()
    started = time.monotonic()
    hints, plain, aside = _sorted_items(items)
    claimed, duplicates, others = tracing.traced(
        "jobs.claim_many",
        lambda: runtime.claim_reconnecting(lambda: claim_many(plain, worker=owner)),
    )
    aside.extend(hints[job_id] for job_id in others)
    reports = [ExecutionReport(Outcome.DUPLICATE, str(job_id)) for job_id in duplicates]
    if duplicates:
        counter_increment(DUPLICATE_DELIVERIES, by=len(duplicates))
    if claimed:
        reports += _run_and_commit(claimed)
    return reports + _one_by_one(aside, started=started)


def _sorted_items(
    items: list[dict[str, Any]],
) -> tuple[dict[UUID, dict[str, Any]], list[tuple[UUID, registry.KindSpec]], list[dict[str, Any]]]:
    """The message's items by job id (a job named twice is one delivery), split into those the
    batch claim may take and those delivered one by one."""
    hints: dict[UUID, dict[str, Any]] = {}
    plain: list[tuple[UUID, registry.KindSpec]] = []
    aside: list[dict[str, Any]] = []
    for item in items:
        job_id = _job_id(item)
        if job_id is None or job_id in hints:
            continue
        hints[job_id] = item
        spec = dispatch.batch_spec(item)
        if spec is None:
            aside.append(item)
        else:
            plain.append((job_id, spec))
    return hints, plain, aside


def _run_and_commit(claimed: list[Claimed]) -> list[ExecutionReport]:
    """Steps 3-4 for the claimed jobs: run each, commit every outcome together, report."""
    failpoint("worker.batch_after_claim")
    run_claimed(claimed)
    failpoint("worker.batch_before_commit")
    tracing.traced(
        "jobs.group_commit",
        lambda: retried_when_refused(lambda: group_commit(claimed), what="the group commit"),
    )
    failpoint("worker.after_complete_before_ack")
    stale = [j.lease for j in claimed if (j.verdict or _LOST).outcome is Outcome.STALE]
    if stale:
        dispatch.send_again_if_claim_lost(stale)
    reports = []
    for job in claimed:
        verdict = job.verdict or _LOST
        runtime.log_verdict(job.lease, verdict)
        if verdict.outcome is not Outcome.STALE:
            runtime.after_outcome(job.spec, job.lease, verdict.outcome)
        reports.append(
            ExecutionReport(verdict.outcome, str(job.lease.job_id), job.lease.generation)
        )
    return reports


def _one_by_one(aside: list[dict[str, Any]], *, started: float) -> list[ExecutionReport]:
    """The items the batch claim left: each delivered alone while the batch's budget lasts;
    the rest get a message of their own."""
    reports: list[ExecutionReport] = []
    late: list[UUID] = []
    for item in aside:
        if time.monotonic() - started >= jobs_settings.BATCH_BUDGET_SECONDS:
            late.append(UUID(str(item["job_id"])))  # the budget is spent: a message of its own
            continue
        reports.append(
            runtime.execute(
                item["job_id"],
                kind=item.get("kind"),
                kind_version=item.get("kind_version"),
                hints=item,
            )
        )
    if late:
        dispatch.send_again(late)
        reports.extend(ExecutionReport(Outcome.DEFERRED, str(job_id)) for job_id in late)
    return reports
