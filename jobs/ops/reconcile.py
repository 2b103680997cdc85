"""Reconciliation: compare what was accepted with what finished, and re-enqueue lost work.

"An empty queue does not prove all accepted work succeeded." The broker can lose a published
message (Redis restarted without persistence, a flush, a deleted queue). The outbox then says
"published" while no worker will ever see the job. The redelivery check (jobs.ops.redeliver)
republishes such work within a deadline derived from the backlog; this is the full report and
its backstop, with a fixed, patient threshold. Lost work is a job that is:
  - `queued`/`retry_wait` and due for more than `stale_after` seconds (nothing claimed it:
    a claim moves it to `leased`),
  - that had a message: it has outbox rows, all published, the last one more than
    `stale_after` seconds ago (an unpublished row is the relay's business; a job with no row
    at all waits for its turn under admission control, see jobs.dispatch),
  - and that a claim would take now: the head of its serialization key, and its tenant's and
    kind's caps leave room (the claim's own rules; a job deferred by a cap waits for the
    hand-over, not for us).
Repair (`reconcile_repair_lost`), one transaction per batch:
  1. Lock the candidate rows (SKIP LOCKED) and re-check every condition under the lock; a
     worker claiming one meanwhile wins and we skip it.
  2. Insert an outbox row per job (jobs.dispatch.job_republish, no fast path) and a
     JobEvent naming the reconciler; commit. A crash before the commit changes nothing.
  3. Publish the new rows in relay batches (outbox_relay_until_empty). A crash before that
     leaves committed rows the relay publishes. A duplicate message is absorbed by the claim.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from jobs import registry
from jobs.conf import jobs_settings
from jobs.counters import INCOMPATIBLE_DEPLOYMENT, counter_values
from jobs.dispatch import job_republish
from jobs.models import Job
from jobs.states import ACTIVE, CLAIMABLE, JobState
from outbox.models import OutboxEntry
from outbox.relay import outbox_relay_until_empty

from . import selectors

logger = logging.getLogger(__name__)

RECONCILER = "reconciler"


def default_stale_after() -> float:
    return float(jobs_settings.RECONCILE_STALE_AFTER)


def _undelivered(cutoff: datetime) -> QuerySet[OutboxEntry]:
    """Outbox rows that still owe (or only just made) a delivery."""
    return OutboxEntry.objects.filter(Q(published_at__isnull=True) | Q(published_at__gte=cutoff))


def earlier_in_key() -> QuerySet[Job]:
    """Active jobs of the outer job's serialization key created before it (it is not the head)."""
    return Job.objects.filter(
        serialization_key=OuterRef("serialization_key"),
        state__in=[s.value for s in ACTIVE],
        created_at__lt=OuterRef("created_at"),
    )


def lost_jobs(*, stale_after: float) -> QuerySet[Job]:
    """Due jobs whose every message was published long ago (module docstring), oldest first.

    Caps are checked per job by `blocked_by_caps` (they need the kind's registry spec).
    """
    cutoff = timezone.now() - timedelta(seconds=stale_after)
    return (
        Job.objects.filter(state__in=[s.value for s in CLAIMABLE], next_attempt_at__lt=cutoff)
        .filter(Exists(OutboxEntry.objects.filter(job_id=OuterRef("pk"))))
        .exclude(Exists(_undelivered(cutoff).filter(job_id=OuterRef("pk"))))
        .exclude(Q(serialization_key__isnull=False) & Exists(earlier_in_key()))
        .order_by("next_attempt_at")
    )


def blocked_by_caps(job: Job) -> bool:
    """The claim's cap rules (jobs.leases): a full tenant or kind makes the job wait its turn."""
    spec = registry.kind_version(job.kind, job.kind_version)
    if spec is None:
        return False
    leased = Job.objects.filter(kind=job.kind, state=JobState.LEASED.value).exclude(pk=job.pk)
    if (
        spec.tenant_limit is not None
        and job.tenant_id is not None
        and leased.filter(tenant_id=job.tenant_id).count() >= spec.tenant_limit
    ):
        return True
    return spec.kind_limit is not None and leased.count() >= spec.kind_limit


def lost_job_ids(*, stale_after: float, limit: int = 1000) -> list[UUID]:
    """Lost work, caps included, at most `limit` ids."""
    found: list[UUID] = []
    candidates = lost_jobs(stale_after=stale_after).only("id", "kind", "kind_version", "tenant_id")
    # One bounded fetch (a server-side cursor gets a much slower plan here); capped jobs
    # beyond it are found by the next run.
    for job in candidates[: limit * 4]:
        if not blocked_by_caps(job):
            found.append(job.pk)
            if len(found) >= limit:
                break
    return found


def _repair_batch(job_ids: list[UUID], *, stale_after: float) -> list[str]:
    """Steps 1-2 of the module docstring for one batch; returns the ids re-enqueued."""
    repaired: list[str] = []
    with transaction.atomic():
        locked = list(
            lost_jobs(stale_after=stale_after)
            .filter(pk__in=job_ids)
            .select_for_update(skip_locked=True, of=("self",))
        )
        for job in locked:
            if blocked_by_caps(job):
                continue
            job_republish(
                job,
                reason="reconciler: message lost by the broker; re-enqueued",
                actor=RECONCILER,
                fast_path=False,
            )
            repaired.append(str(job.pk))
    return repaired


def reconcile_repair_lost(
    *, stale_after: float | None = None, job_ids: list[UUID] | None = None, batch: int = 200
) -> list[str]:
    """Re-enqueue lost work through the outbox and publish it; returns the ids repaired."""
    threshold = default_stale_after() if stale_after is None else stale_after
    candidates = lost_job_ids(stale_after=threshold) if job_ids is None else job_ids
    repaired: list[str] = []
    for start in range(0, len(candidates), batch):
        repaired += _repair_batch(candidates[start : start + batch], stale_after=threshold)
    if repaired:
        outbox_relay_until_empty(time_budget=30.0)
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
    kinds: list[KindSummary] | None  # None: not counted (reconcile_run's `counts`)
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


def _kind_summaries() -> list[KindSummary]:
    return [
        KindSummary(
            kind=k.kind,
            accepted=k.accepted,
            terminal=k.terminal,
            quarantined=k.quarantined,
            active=k.active,
            by_state=dict(sorted(k.by_state.items())),
        )
        for k in sorted(selectors.job_counts_by_kind().values(), key=lambda k: k.kind)
    ]


def reconcile_run(
    *, repair: bool = False, stale_after: float | None = None, counts: bool = True
) -> ReconcileReport:
    """Check every invariant an operator can check from the tables; optionally repair lost work.

    `counts`: the per-kind counts of every state, the operator's overview. They are one GROUP
    BY over the whole job table, finished history included: a scan as long as the table,
    slower still while a held xmin horizon keeps index-only scans reading the heap. Beat's
    run (every JOBS_RECONCILE_INTERVAL) leaves them out; nothing else here reads more than
    the first rows of a partial index or the rows it finds.
    """
    threshold = default_stale_after() if stale_after is None else stale_after
    lost_ids = lost_job_ids(stale_after=threshold)
    lost = [str(pk) for pk in lost_ids]
    repaired = (
        reconcile_repair_lost(stale_after=threshold, job_ids=lost_ids) if repair and lost else []
    )
    lag = selectors.outbox_lag()
    report = ReconcileReport(
        checked_at=timezone.now().isoformat(),
        stale_after=threshold,
        kinds=_kind_summaries() if counts else None,
        oldest_queued_age_seconds=round(selectors.oldest_queued_age_seconds(), 3),
        lost=lost,
        repaired=repaired,
        expired_leases=selectors.expired_lease_count(older_than=threshold),
        stale_effects=selectors.stale_effect_count(older_than=threshold),
        open_quarantine=selectors.open_quarantine_count(),
        incompatible_deployment={
            label: value
            for (name, label), value in sorted(counter_values().items())
            if name == INCOMPATIBLE_DEPLOYMENT
        },
        outbox_pending=lag.pending,
        outbox_lag_seconds=round(lag.lag_seconds, 3),
    )
    report.broken = _broken(report)
    return report
