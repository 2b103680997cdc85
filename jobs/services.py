"""Writes to jobs. Each service owns its transaction; each state change is a guarded UPDATE."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from . import admission, dispatch
from .events import job_event_record
from .exceptions import InvalidTransition
from .models import Job
from .plans import in_states
from .states import ACTIVE, CLAIMABLE, JobState, sources_of

logger = logging.getLogger(__name__)


def job_rearm_if_early(*, job_id: UUID) -> bool:
    """A message arrived before the job was due (clock skew, a stray duplicate): make sure an
    unpublished outbox row will deliver it at its due time, so the early ack loses nothing."""
    from outbox.models import OutboxEntry

    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.job_state not in CLAIMABLE or job.next_attempt_at is None:
            return False
        if job.next_attempt_at <= timezone.now():
            return False  # due, so not early: it waits for its turn (admission hand-over)
        if OutboxEntry.objects.filter(job_id=job_id, published_at__isnull=True).exists():
            return False
        dispatch.job_enqueue_execute(job, available_at=job.next_attempt_at)
        return True


def job_cancel(*, job_id: UUID, actor: str) -> Job:
    """Cancel now if waiting (for its turn or, `after=`, for its dependencies: the database
    then drops its dormant message, jobs.links); ask a running job to stop; refuse a finished
    job."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        now = timezone.now()
        state = job.job_state
        if state in CLAIMABLE or state is JobState.WAITING:
            in_states(Job.objects.filter(pk=job.pk), [state.value]).update(
                state=JobState.CANCELLED.value,
                finished_at=now,
                updated_at=now,
                error_category="cancelled",
                error_message=f"cancelled by {actor}",
            )
            job_event_record(
                job,
                from_state=state.value,
                to_state=JobState.CANCELLED.value,
                reason="cancelled",
                actor=actor,
            )
            if state is not JobState.WAITING:  # a waiting job held no turn
                admission.admission_handoff(job, left_active=True)
        elif state == JobState.LEASED:
            if job.cancel_requested_at is None:
                in_states(Job.objects.filter(pk=job.pk), [state.value]).update(
                    cancel_requested_at=now, updated_at=now
                )
                job_event_record(
                    job,
                    from_state=state.value,
                    to_state=state.value,
                    reason="cancel requested",
                    actor=actor,
                )
        elif state != JobState.CANCELLED:
            raise InvalidTransition(f"job {job_id} is {state.value}; it can no longer be cancelled")
        job.refresh_from_db()
        return job


def job_transition(*, job: Job, to: JobState, actor: str, reason: str, **fields: Any) -> None:
    """Operator transition outside a lease, guarded by the current state and the table."""
    source = job.job_state
    if source not in sources_of(to):
        raise InvalidTransition(f"job {job.pk}: {source.value} -> {to.value} is not allowed")
    now = timezone.now()
    rows = Job.objects.filter(pk=job.pk, generation=job.generation)
    updated = in_states(rows, [source.value]).update(state=to.value, updated_at=now, **fields)
    if updated != 1:
        raise InvalidTransition(f"job {job.pk} changed under us; reload and try again")
    job.state = to.value
    for name, value in fields.items():
        setattr(job, name, value)
    job_event_record(job, from_state=source.value, to_state=to.value, reason=reason, actor=actor)


def jobs_active_q() -> Q:
    return Q(state__in=[s.value for s in ACTIVE])
