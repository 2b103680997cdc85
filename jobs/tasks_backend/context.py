"""The TaskContext our backend hands a `takes_context=True` task, and the job behind it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.tasks import TaskContext

from jobs.context import JobContext

if TYPE_CHECKING:
    _TaskContextBase = TaskContext[Any, Any]
else:
    _TaskContextBase = TaskContext


# django-stubs declares TaskContext unfrozen; Django's is frozen, as this one must be.
@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTaskContext(_TaskContextBase):  # type: ignore[misc]
    """Django's TaskContext (`attempt`, `task_result`) plus `job`: the JobContext of the lease
    the task runs under (effect ledger, write-once artifacts, heartbeat, cancellation)."""

    job: JobContext


def job_context(context: TaskContext[Any, Any]) -> JobContext:
    """The JobContext behind a task's context: `job_context(context).effect(name, fn)`.

    TypeError for a context from another backend (the ImmediateBackend in a test, say)."""
    if not isinstance(context, DurableTaskContext):
        raise TypeError(
            f"{type(context).__name__} is not from jobs.tasks_backend.DurableJobsBackend: "
            "the effect ledger and artifacts exist only for tasks run by durable workers"
        )
    return context.job
