"""A task's job read back as Django's TaskResult: status, return value, errors, workers.

Everything comes from the job row and its event trail (jobs_jobevent), the same rows the ops
page and admin read; nothing is stored twice.
  - status: queued and retry_wait are READY (a retry is "ready to be executed again"),
    leased is RUNNING, succeeded is SUCCESSFUL; quarantined, failed (discarded) and
    cancelled are FAILED.
  - worker_ids: the lease-owner token of each attempt's claim, so `attempts` counts attempts
    (a worker that lacked the code and gave the job back spent none). An operator's redrive
    keeps counting.
  - errors: one per failed attempt, in order: the exception's class path and traceback; a
    worker lost with its lease is `errors.WorkerLost`, a cancellation `errors.JobCancelled`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist

from jobs.models import Job, JobEvent
from jobs.retry import Category
from jobs.states import JobState

from .errors import JobCancelled, WorkerLost

RETURN_VALUE = "return_value"  # the key of Job.result that holds the task's return value

STATUS: dict[JobState, TaskResultStatus] = {
    JobState.QUEUED: TaskResultStatus.READY,
    JobState.WAITING: TaskResultStatus.READY,  # a job with `after=` (jobs.links)
    JobState.RETRY_WAIT: TaskResultStatus.READY,
    JobState.LEASED: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.QUARANTINED: TaskResultStatus.FAILED,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}


def _path(cls: type[BaseException]) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class History:
    """What a job's event trail says about its attempts."""

    claims: dict[tuple[int, int], str] = field(default_factory=dict)  # (redrives, attempt)
    errors: list[TaskError] = field(default_factory=list)
    last_claim_at: datetime | None = None
    quarantined_at: datetime | None = None
    run_after: datetime | None = None


def _error_of_failure(event: JobEvent) -> TaskError | None:
    """A leased -> retry_wait/quarantined event as an error; None for a give-back that spent
    no attempt (a worker without the code)."""
    details = event.details or {}
    if details.get("decision") == "release":
        return None
    if "exception_class" in details:
        return TaskError(
            exception_class_path=str(details["exception_class"]),
            traceback=str(details.get("traceback", "")),
        )
    if details.get("category") == Category.LEASE_EXPIRED.value:
        return TaskError(exception_class_path=_path(WorkerLost), traceback=event.reason)
    return TaskError(exception_class_path=_path(Exception), traceback=event.reason)


def history_of(events: list[JobEvent]) -> History:
    """Replay the trail: claims per (redrive, attempt), errors in order, and the times."""
    history = History()
    redrives = 0
    for event in events:
        source, target = event.from_state, event.to_state
        if not source and target == JobState.QUEUED:
            run_after = (event.details or {}).get("run_after")
            history.run_after = datetime.fromisoformat(run_after) if run_after else None
        elif source == JobState.QUARANTINED and target == JobState.QUEUED:
            redrives += 1
        elif target == JobState.LEASED and event.worker:  # a claim (a cancel request has none)
            if source == JobState.LEASED:
                history.errors.append(
                    TaskError(
                        exception_class_path=_path(WorkerLost),
                        traceback=f"the lease of attempt {event.attempt - 1} expired; "
                        f"{event.worker} took the job over",
                    )
                )
            history.claims[(redrives, event.attempt)] = event.worker
            history.last_claim_at = event.at
        elif source == JobState.LEASED and target in (JobState.RETRY_WAIT, JobState.QUARANTINED):
            error = _error_of_failure(event)
            if error is not None:
                history.errors.append(error)
            if target == JobState.QUARANTINED:
                history.quarantined_at = event.at
        elif target == JobState.CANCELLED:
            history.errors.append(
                TaskError(exception_class_path=_path(JobCancelled), traceback=event.reason)
            )
    return history


def task_result_of(job: Job, events: list[JobEvent], task: Task[Any, Any]) -> TaskResult[Any, Any]:
    """The TaskResult of `job`, whose task is `task`, from its row and its event trail."""
    history = history_of(events)
    state = job.job_state
    if history.run_after is not None:
        task = task.using(run_after=history.run_after)
    finished_at = job.finished_at
    if state == JobState.QUARANTINED:
        finished_at = history.quarantined_at
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(job.pk),
        status=STATUS[state],
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=finished_at,
        last_attempted_at=history.last_claim_at,
        args=list(job.input.get("args", [])),
        kwargs=dict(job.input.get("kwargs", {})),
        backend=task.backend,
        errors=history.errors,
        worker_ids=list(history.claims.values()),
    )
    if state == JobState.SUCCEEDED and isinstance(job.result, dict):
        object.__setattr__(result, "_return_value", job.result.get(RETURN_VALUE))
    return result


def task_result_new(job: Job, task: Task[Any, Any]) -> TaskResult[Any, Any]:
    """The TaskResult of a job just accepted: READY, nothing run yet (no query)."""
    return task_result_of(job, [], task)


def job_of_result_id(result_id: Any) -> Job:
    """The job behind a result id; TaskResultDoesNotExist for anything else."""
    try:
        job_id = UUID(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        raise TaskResultDoesNotExist(result_id)
    return job


def job_events(job: Job) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job_id=job.pk).order_by("id"))


def task_result_read(job_id: Any, task: Task[Any, Any]) -> TaskResult[Any, Any]:
    """The TaskResult of the job `job_id` now (two queries: the row and its trail)."""
    job = job_of_result_id(job_id)
    return task_result_of(job, job_events(job), task)
