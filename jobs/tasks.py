"""Thin Celery entry points. Jobs never use Celery retries, ETAs or countdowns."""

from __future__ import annotations

import math
from typing import Any

from celery import shared_task

from . import batch, runtime, tracing
from .conf import jobs_settings
from .gate import GatedTask, requeued_when_database_unreachable
from .reaper import jobs_reap


# The delivery guarantees travel with the task, not with the project's Celery settings: ack
# only after the outcome committed, requeue when the worker process dies or the database is
# unreachable (then the worker pauses its jobs consumers: jobs.gate), and a hard limit below
# the broker's redelivery window (checked when a worker starts: jobs.worker_checks).
@shared_task(
    name="jobs.execute",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    base=GatedTask,
    time_limit=jobs_settings.TASK_TIME_LIMIT,
    soft_time_limit=jobs_settings.TASK_SOFT_TIME_LIMIT,
)
def execute(
    job_id: str,
    generation: int | None = None,
    kind: str | None = None,
    kind_version: int | None = None,
    **later_hints: Any,
) -> None:
    """Deliver one job; the message carries its id and hints (generation, kind, version).

    Hints a later release adds are accepted and ignored, so a message from a newer web tier
    never fails on an older worker during a rolling deploy (docs/operations.md)."""
    with requeued_when_database_unreachable("a delivery"):
        runtime.execute(job_id, kind=kind, kind_version=kind_version, hints=later_hints)


# A batch message: several jobs, claimed with one statement and committed with one
# transaction before the ack (jobs.batch). Its limits add the batch budget, after which it
# starts no more handlers.
@shared_task(
    name="jobs.execute_many",
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    base=GatedTask,
    time_limit=jobs_settings.TASK_TIME_LIMIT + math.ceil(jobs_settings.BATCH_BUDGET_SECONDS),
    soft_time_limit=(
        jobs_settings.TASK_SOFT_TIME_LIMIT + math.ceil(jobs_settings.BATCH_BUDGET_SECONDS)
    ),
)
def execute_many(items: list[dict[str, Any]], **later_hints: Any) -> None:
    """Deliver the jobs of one batch message; each item is one `jobs.execute` message's
    kwargs (job_id, generation, kind, kind_version). The whole message is requeued when the
    database is unreachable: jobs it already finished are then duplicates, acked at claim."""
    with (
        requeued_when_database_unreachable("a batch delivery"),
        tracing.batch_delivery(items, later_hints),
    ):
        batch.execute_many(items)


# Every JOBS_REAP_INTERVAL (5 s): no task events, so Flower's list shows the jobs' tasks.
@shared_task(name="jobs.maintenance.reap", ignore_result=False, send_events=False)
def reap() -> dict[str, Any]:
    result = jobs_reap()
    return {"expired": result.expired, "retried": result.retried, "quarantined": result.quarantined}


# Every JOBS_REDELIVER_INTERVAL (2 s): no task events either.
@shared_task(name="jobs.maintenance.redeliver", ignore_result=False, send_events=False)
def redeliver() -> dict[str, Any]:
    """Beat: publish again the due work nobody claimed within its delivery deadline."""
    from .ops.redeliver import redeliver_run

    return redeliver_run().as_dict()


@shared_task(name="jobs.maintenance.reconcile", ignore_result=False)
def reconcile() -> dict[str, Any]:
    """Beat: re-enqueue work the broker lost; the stored result is the check's summary
    (without the per-kind counts: a scan of the whole job table every run)."""
    from .ops.reconcile import reconcile_run

    report = reconcile_run(repair=True, counts=False)
    return {
        "ok": report.ok,
        "broken": report.broken,
        "lost": len(report.lost),
        "repaired": len(report.repaired),
        "expired_leases": report.expired_leases,
        "stale_effects": report.stale_effects,
        "open_quarantine": report.open_quarantine,
    }


# Every JOBS_SCHEDULE_INTERVAL (5 s): one job per tick of each due schedule (jobs.scheduler).
@shared_task(name="jobs.maintenance.schedules", ignore_result=False, send_events=False)
def schedules() -> dict[str, Any]:
    """Beat: submit the due ticks' jobs; safe with two beats (rows locked, keys unique)."""
    from .scheduler import schedules_tick

    return schedules_tick().as_dict()


# Every JOBS_PRUNE_INTERVAL (60 s): finished jobs past JOBS_RETENTION_SECONDS, bounded batches.
@shared_task(name="jobs.maintenance.prune", ignore_result=False, send_events=False)
def prune() -> dict[str, int]:
    """Beat: delete old finished jobs with what they own (jobs.retention), about 10 s a run."""
    from .retention import jobs_prune

    return jobs_prune().as_dict()
