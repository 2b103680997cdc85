"""A job's history rows (JobEvent): one per state change, at its generation and attempt."""

from __future__ import annotations

from typing import Any

from .leases import Lease
from .models import Job, JobEvent


def job_event_new(
    job: Job | Lease,
    *,
    from_state: str,
    to_state: str,
    reason: str,
    worker: str = "",
    actor: str = "",
    details: dict[str, Any] | None = None,
    attempt: int | None = None,
) -> JobEvent:
    """An unsaved JobEvent of `job` at its current generation and attempt (or `attempt`)."""
    job_id = job.job_id if isinstance(job, Lease) else job.pk
    return JobEvent(
        job_id=job_id,
        from_state=from_state,
        to_state=to_state,
        generation=job.generation,
        attempt=job.attempt if attempt is None else attempt,
        worker=worker,
        actor=actor,
        reason=reason[:500],
        details=details or {},
    )


def job_event_record(job: Job | Lease, **fields: Any) -> JobEvent:
    """`job_event_new(job, **fields)`, saved."""
    event = job_event_new(job, **fields)
    event.save()
    return event
