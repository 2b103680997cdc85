"""Django's Tasks framework, durable: `TASKS = {"default": {"BACKEND":
"jobs.tasks_backend.DurableJobsBackend"}}` (docs/django-tasks.md).

`@task` functions become jobs of kind "task:<module path>"; `job_context(context)` reaches
the JobContext (effect ledger, artifacts) from a `takes_context=True` task.
"""

from __future__ import annotations

from .backend import DurableJobsBackend
from .context import DurableTaskContext, job_context
from .errors import JobCancelled, ReturnValueNotJSON, WorkerLost
from .options import DurableTask

__all__ = [
    "DurableJobsBackend",
    "DurableTask",
    "DurableTaskContext",
    "JobCancelled",
    "ReturnValueNotJSON",
    "WorkerLost",
    "job_context",
]
