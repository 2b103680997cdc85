"""The reaper: expired leases become retries, or quarantine once the budget is spent.

Protocol of `jobs_reap` (one transaction per batch):
  1. Lock up to `limit` leased rows whose lease ended (database clock), SKIP LOCKED, so two
     reapers split the work and a heartbeat racing us waits for our commit, then misses.
     The walk starts where this process's last complete run ended (`lease_floor`,
     outbox.floors): leases that ended before it were reaped then.
  2. For each, decide like a failed attempt (category lease_expired): retry_wait plus an outbox
     row due at the backoff, or quarantine with "lease expired N times". Each write is fenced
     by the generation we read under the lock.
  3. Commit. A crash before the commit changes nothing; the next reaper run redoes it.
The old owner may still be running: its later writes carry the old generation and match zero
rows (LeaseLost, counted as stale writes).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from outbox.floors import SweptFloor

from . import lifecycle, registry
from .counters import EXPIRED_LEASES, counter_increment
from .exceptions import LeaseLost
from .leases import Lease
from .models import Job, JobEvent
from .plans import in_index_order
from .retry import Action, Category, RetryPolicy, decide
from .selectors import db_now
from .states import JobState

logger = logging.getLogger(__name__)
_rng = random.SystemRandom()

# Where the next run's walk of the lease index starts (outbox.floors): without it, under a
# held xmin horizon every run walks every lease that ended since the horizon was held.
lease_floor = SweptFloor()


@dataclass
class ReapResult:
    expired: int = 0
    retried: int = 0
    quarantined: int = 0
    cancelled: int = 0


def _lease_of(job: Job) -> Lease:
    """The lease an expired job's row still names (its owner's token and generation)."""
    return Lease.from_row(
        job.pk,
        vars(job),
        worker=job.lease_owner or "",
        lease_seconds=0,
        previous_state=JobState.LEASED.value,
        claimed_at=job.heartbeat_at or job.updated_at,
    )


def _expiries_so_far(job: Job) -> int:
    """Expired leases of this job since its last redrive: reaped ones and taken-over ones."""
    events = JobEvent.objects.filter(job=job)
    redrive = (
        events.filter(from_state=JobState.QUARANTINED.value, to_state=JobState.QUEUED.value)
        .order_by("-id")
        .values_list("id", flat=True)
        .first()
    )
    if redrive is not None:
        events = events.filter(id__gt=redrive)
    # Reaped retries carry the category; a worker's takeover of an expired lease says so.
    return events.filter(
        Q(details__category=Category.LEASE_EXPIRED.value, to_state=JobState.RETRY_WAIT.value)
        | Q(reason="took over expired lease")
    ).count()


def jobs_reap(*, limit: int = 500) -> ReapResult:
    """Recover one batch of expired leases (see the module docstring)."""
    result = ReapResult()
    started, floor = time.monotonic(), lease_floor.bound()
    with transaction.atomic():
        now = db_now()
        leases = Job.objects.filter(state=JobState.LEASED.value, lease_until__lt=now)
        if floor is not None:
            leases = leases.filter(lease_until__gte=floor)
        with in_index_order():  # from the floor on the lease index (jobs.plans)
            expired = list(
                leases.select_for_update(skip_locked=True).order_by("lease_until")[:limit]
            )
        for job in expired:
            spec = registry.kind_version(job.kind, job.kind_version)
            policy = spec.policy if spec else RetryPolicy(max_attempts=job.max_attempts)
            count = _expiries_so_far(job) + 1
            decision = decide(
                category=Category.LEASE_EXPIRED,
                label=f"lease expired {count} times",
                attempt=job.attempt,
                policy=policy,
                deadline=job.deadline,
                now=timezone.now(),
                rng=_rng,
            )
            lease = _lease_of(job)
            message = f"lease held by {job.lease_owner} expired (attempt {job.attempt})"
            try:
                if job.cancel_requested_at is not None:
                    # Its owner died before seeing the cancel request: honour it, do not rerun.
                    lifecycle.job_cancel_finish(lease, reason="cancelled: lease expired")
                    result.cancelled += 1
                elif decision.action is Action.RETRY:
                    lifecycle.job_retry_schedule(lease, decision=decision, error_message=message)
                    result.retried += 1
                else:
                    lifecycle.job_quarantine(
                        lease,
                        decision=decision,
                        error_message=message,
                        responsible=spec.responsible if spec else "operators",
                    )
                    result.quarantined += 1
            except LeaseLost:
                continue
            result.expired += 1
    if len(expired) < limit:  # every unlocked lease that ended before `now` was seen
        lease_floor.swept(now, walked_from=floor, started=started)
    if result.expired:
        counter_increment(EXPIRED_LEASES, by=result.expired)
        logger.info("reaper recovered %d expired leases", result.expired)
    return result
