"""Reconciliation: compare what was accepted with what finished, and re-enqueue lost work.

"An empty queue does not prove all accepted work succeeded." The broker can lose a published
message (Redis restarted without persistence, a flush, a deleted queue). The outbox then says
"published" while no worker will ever see the job. Lost work is a job that is:
  - `queued`/`retry_wait` and due for more than `stale_after` seconds (nothing claimed it:
    a claim moves it to `leased`),
  - whose outbox rows are all published, the last one more than `stale_after` seconds ago
    (an unpublished row is the relay's business, not ours),
  - and that is the head of its serialization key (later jobs of a key wait their turn
    without a message on purpose).
Repair (`reconcile_repair_lost`), one short transaction per job:
  1. Lock the job row (SKIP LOCKED) and re-check it is still lost; a worker claiming it
     meanwhile wins and we skip it.
  2. Insert an outbox row (jobs.services.job_enqueue_execute) and a JobEvent naming the
     reconciler; commit. A crash before the commit changes nothing; after it, the relay (or
     the fast path) publishes. A duplicate message is absorbed by the worker's claim.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from jobs import registry
from jobs.models import Job
from jobs.services import job_enqueue_execute, job_event_record
from jobs.signals import INCOMPATIBLE_DEPLOYMENT, signal_values
from jobs.states import ACTIVE, CLAIMABLE
from outbox.models import OutboxEntry

from . import selectors

logger = logging.getLogger(__name__)

RECONCILER = "reconciler"


def default_stale_after() -> float:
    return float(settings.JOBS_RECONCILE_STALE_AFTER)


def lost_jobs(*, stale_after: float) -> QuerySet[Job]:
    """Queryset of lost work (module docstring), oldest due first."""
    cutoff = timezone.now() - timedelta(seconds=stale_after)
    undelivered = OutboxEntry.objects.filter(job_id=OuterRef("pk")).filter(
        Q(published_at__isnull=True) | Q(published_at__gte=cutoff)
    )
    earlier_in_key = Job.objects.filter(
        serialization_key=OuterRef("serialization_key"),
        state__in=[s.value for s in ACTIVE],
        created_at__lt=OuterRef("created_at"),
    )
    return (
        Job.objects.filter(state__in=[s.value for s in CLAIMABLE], next_attempt_at__lt=cutoff)
        .exclude(Exists(undelivered))
        .exclude(Q(serialization_key__isnull=False) & Exists(earlier_in_key))
        .order_by("next_attempt_at")
    )


def _repair_one(job_id: UUID, *, stale_after: float) -> bool:
    """Steps 1-2 of the module docstring for one job; False when it is no longer lost."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(skip_locked=True)
            .filter(pk__in=lost_jobs(stale_after=stale_after).filter(pk=job_id).values("pk"))
            .order_by()
            .first()
        )
        if job is None:
            return False
        spec = registry.kind_version(job.kind, job.kind_version)
        job_enqueue_execute(
            job_id=job.pk, queue=spec.queue if spec else "jobs", generation_hint=job.generation
        )
        job_event_record(
            job,
            from_state=job.state,
            to_state=job.state,
            reason="reconciler: message lost by the broker; re-enqueued",
            actor=RECONCILER,
        )
    return True


def reconcile_repair_lost(*, stale_after: float | None = None, limit: int = 1000) -> list[str]:
    """Re-enqueue every lost job through the outbox; returns the ids repaired."""
    threshold = default_stale_after() if stale_after is None else stale_after
    candidates = list(lost_jobs(stale_after=threshold).values_list("pk", flat=True)[:limit])
    repaired = [str(pk) for pk in candidates if _repair_one(pk, stale_after=threshold)]
    if repaired:
        logger.warning(
            "reconciler re-enqueued %d jobs lost by the broker",
            len(repaired),
            extra={"repaired": len(repaired)},
        )
    return repaired


@dataclass
class KindSummary:
    kind: str
    accepted: int
    terminal: int
    quarantined: int
    active: int
    by_state: dict[str, int]


@dataclass
class ReconcileReport:
    """What reconciliation saw; `broken` lists the invariants that do not hold."""

    checked_at: str
    stale_after: float
    kinds: list[KindSummary]
    oldest_queued_age_seconds: float
    lost: list[str]
    repaired: list[str]
    expired_leases: int
    stale_effects: int
    open_quarantine: int
    incompatible_deployment: dict[str, int]
    outbox_pending: int
    outbox_lag_seconds: float
    broken: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.broken

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _broken(report: ReconcileReport) -> list[str]:
    problems = []
    unrepaired = sorted(set(report.lost) - set(report.repaired))
    if unrepaired:
        problems.append(f"lost work: {len(unrepaired)} due jobs with no live message")
    if report.expired_leases:
        problems.append(f"expired leases: {report.expired_leases} not reaped")
    if report.stale_effects:
        problems.append(f"stale effects: {report.stale_effects} pending/uncertain ledger entries")
    return problems


def reconcile_run(*, repair: bool = False, stale_after: float | None = None) -> ReconcileReport:
    """Check every invariant an operator can check from the tables; optionally repair lost work."""
    threshold = default_stale_after() if stale_after is None else stale_after
    lost = [str(pk) for pk in lost_jobs(stale_after=threshold).values_list("pk", flat=True)[:1000]]
    repaired = reconcile_repair_lost(stale_after=threshold) if repair and lost else []
    lag = selectors.outbox_lag()
    report = ReconcileReport(
        checked_at=timezone.now().isoformat(),
        stale_after=threshold,
        kinds=[
            KindSummary(
                kind=k.kind,
                accepted=k.accepted,
                terminal=k.terminal,
                quarantined=k.quarantined,
                active=k.active,
                by_state=dict(sorted(k.by_state.items())),
            )
            for k in sorted(selectors.job_counts_by_kind().values(), key=lambda k: k.kind)
        ],
        oldest_queued_age_seconds=round(selectors.oldest_queued_age_seconds(), 3),
        lost=lost,
        repaired=repaired,
        expired_leases=selectors.expired_lease_count(older_than=threshold),
        stale_effects=selectors.stale_effect_count(older_than=threshold),
        open_quarantine=selectors.open_quarantine_count(),
        incompatible_deployment={
            label: value
            for (name, label), value in sorted(signal_values().items())
            if name == INCOMPATIBLE_DEPLOYMENT
        },
        outbox_pending=lag.pending,
        outbox_lag_seconds=round(lag.lag_seconds, 3),
    )
    report.broken = _broken(report)
    return report
