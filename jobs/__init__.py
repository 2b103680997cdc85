"""durable-jobs: accepted work reaches one committed result or an operator's quarantine.

Public API: `jobs.submit(...)`, `jobs.submit_many([...])`, `jobs.handler`,
`jobs.execute(job_id)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import Job
    from .runtime import ExecutionReport


def submit(**kwargs: Any) -> Job:
    """Accept a job (see jobs.submission.job_submit); callable in or out of a transaction."""
    from .submission import job_submit

    return job_submit(**kwargs)


def submit_many(requests: Any) -> list[Job]:
    """Accept many jobs in one transaction (see jobs.bulk_submit.job_submit_many): each request
    is a dict of `submit`'s keywords."""
    from .bulk_submit import job_submit_many

    return job_submit_many(requests)


def execute(job_id: Any) -> ExecutionReport:
    """Run one delivery of a job through the fenced worker protocol."""
    from .runtime import execute as run

    return run(job_id)


def __getattr__(name: str) -> Any:
    if name == "handler":
        from .registry import handler

        return handler
    raise AttributeError(name)


__all__ = ["execute", "handler", "submit", "submit_many"]
