"""Retention: finished jobs older than JOBS_RETENTION_SECONDS are deleted, in bounded batches.

Every job is several rows (the job, its events, its ledger entries, perhaps a quarantine
record and a callback delivery), and a queue that keeps them all forever grows without bound:
its indexes with it, and each autovacuum pass reads more. The pruner deletes succeeded,
failed and cancelled jobs whose `finished_at` is older than the retention, with the rows that
belong to them, one batch per transaction (`jobs.maintenance.prune` on beat, and
`manage.py jobs_prune`). Never an active, waiting or quarantined job.

A finished job stays while something that stays refers to it (Django's foreign keys on
PostgreSQL are checked at commit, so a batch may hold a parent and its children together):
  - a job that stays names it as `parent` or `replay_of`;
  - a job that stays waits for it (`JobDependency.dependency`), or a quarantine record that
    stays names it as the replacement;
  - its completion callback is still pending (the notice has not been delivered or given up);
  - a model of the host project has a foreign key to it (the pruner never deletes rows it
    does not know: such a job stays until that row lets go of it).
What a job owns goes with it: events, ledger entries, quarantine records, dependency edges it
waited on, callback deliveries and their attempts, its outbox rows. The batch adds the jobs it
deleted to the `pruned_total` counter by end state (jobs.counters), in its own transaction, so
`jobs_accepted_total` and `jobs_completed_total` stay counters while history goes.

Identity lasts as long as the row: a replay of an idempotency key, or a submit of the same
business key, after its job was pruned is a new job. JOBS_RETENTION_SECONDS is therefore the
idempotency window clients may rely on (1 day by default, as River keeps completed jobs
and Stripe idempotency keys; 0 keeps every job).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection, models, transaction
from django.utils import timezone

from outbox.models import OutboxEntry

from .conf import jobs_settings
from .counters import PRUNED, counter_increment
from .models import (
    CallbackDelivery,
    DeliveryStatus,
    EffectLedgerEntry,
    Job,
    JobDependency,
    JobEvent,
    QuarantineRecord,
)
from .states import TERMINAL

logger = logging.getLogger(__name__)

_FINISHED = sorted(state.value for state in TERMINAL)

# Rows that belong to a job: deleted with it (model, its foreign key to the job).
_OWNED: tuple[tuple[type[models.Model], str], ...] = (
    (JobEvent, "job"),
    (EffectLedgerEntry, "job"),
    (QuarantineRecord, "job"),
    (JobDependency, "waiter"),
    (CallbackDelivery, "job"),
    # Its outbox rows: outbox_prune keeps a job's newest row for as long as the job is there.
    (OutboxEntry, "job"),
)

# Oldest first, past the last batch's last row (a run walks past the jobs it must keep).
_CANDIDATES_SQL = f"""
SELECT id, finished_at FROM {Job._meta.db_table}
WHERE finished_at < %s AND state = ANY(%s) AND (finished_at, id) > (%s, %s)
ORDER BY finished_at, id
LIMIT %s
FOR UPDATE SKIP LOCKED
"""
_START = (datetime(1970, 1, 1, tzinfo=UTC), UUID(int=0))
Cursor = tuple[datetime, UUID]

_DELETE_SQL = f"DELETE FROM {Job._meta.db_table} WHERE id = ANY(%s::uuid[]) RETURNING state"


@dataclass
class PruneResult:
    deleted: int = 0  # jobs, with what they own
    kept: int = 0  # old finished jobs of these batches kept because something refers to them
    batches: int = 0
    last: Cursor | None = None  # the last candidate looked at: where the next batch starts

    def as_dict(self) -> dict[str, int]:
        return {"deleted": self.deleted, "kept": self.kept, "batches": self.batches}


def _pinned(ids: set[UUID]) -> set[UUID]:
    """Of `ids`, those something outside `ids` still refers to (module docstring)."""
    pinned: set[UUID] = set()
    outside = ~models.Q(pk__in=ids)
    pinned |= set(
        Job.objects.filter(outside, parent_id__in=ids).values_list("parent_id", flat=True)
    )
    pinned |= set(
        Job.objects.filter(outside, replay_of_id__in=ids).values_list("replay_of_id", flat=True)
    )
    pinned |= set(
        JobDependency.objects.filter(dependency_id__in=ids)
        .exclude(waiter_id__in=ids)
        .values_list("dependency_id", flat=True)
    )
    pinned |= set(
        QuarantineRecord.objects.filter(replacement_id__in=ids)
        .exclude(job_id__in=ids)
        .values_list("replacement_id", flat=True)
    )
    pinned |= set(
        CallbackDelivery.objects.filter(job_id__in=ids, status=DeliveryStatus.PENDING).values_list(
            "job_id", flat=True
        )
    )
    for model, field in _foreign_references():
        pinned |= set(
            model._default_manager.filter(**{f"{field}__in": ids}).values_list(field, flat=True)
        )
    return pinned


def _foreign_references() -> list[tuple[type[models.Model], str]]:
    """Foreign keys to Job from models the pruner does not know (the host project's)."""
    known = {(model, field) for model, field in _OWNED} | {
        (Job, "parent"),
        (Job, "replay_of"),
        (JobDependency, "dependency"),
        (QuarantineRecord, "replacement"),
    }
    found = []
    for relation in Job._meta.related_objects:
        model, field = relation.related_model, relation.field.name
        if isinstance(model, type) and (model, field) not in known:
            found.append((model, field))
    return found


def prune_batch(*, older_than: timedelta, batch: int, after: Cursor = _START) -> PruneResult:
    """One batch in one transaction: lock up to `batch` old finished jobs past `after` (SKIP
    LOCKED: a second pruner takes others), keep those referred to, delete the rest with what
    they own."""
    cutoff = timezone.now() - older_than
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_CANDIDATES_SQL, [cutoff, _FINISHED, *after, batch])
            rows = cursor.fetchall()
        candidates = {row[0] for row in rows}
        doomed = set(candidates)
        while doomed:  # keeping one may pin another (a parent whose child stays): to a fixpoint
            pinned = _pinned(doomed)
            if not pinned:
                break
            doomed -= pinned
        ended = _delete(list(doomed))
        # In the delete's transaction: the metrics' totals (rows + pruned) never go down.
        for state, n in sorted(ended.items()):
            counter_increment(PRUNED, label=state, by=n)
    last = (rows[-1][1], rows[-1][0]) if rows else None
    kept = len(candidates) - len(doomed)
    return PruneResult(deleted=ended.total(), kept=kept, batches=1, last=last)


def _delete(ids: list[UUID]) -> Counter[str]:
    """Delete the jobs `ids` with what they own; their end states, counted. No statement for
    no ids: `id = ANY('{}')` is false, so it implies every partial index's condition, and the
    planner, which believes the partial indexes of active jobs nearly empty, may walk one of
    them whole (the soak's held xmin horizon: 0.36-1.1 s a run for nothing)."""
    if not ids:
        return Counter()
    for model, field in _OWNED:
        model._default_manager.filter(**{f"{field}_id__in": ids}).delete()
    with connection.cursor() as cursor:
        # Not Job's ORM delete: its PROTECT relations would refuse rows the batch deletes
        # together (a parent and its child); the constraints are checked at commit.
        cursor.execute(_DELETE_SQL, [ids])
        return Counter(state for (state,) in cursor.fetchall())


def jobs_prune(
    *,
    older_than: timedelta | None = None,
    batch: int | None = None,
    budget_seconds: float | None = 10.0,
) -> PruneResult:
    """Batches, oldest first, until one is not full or `budget_seconds` passed (None: no
    limit); nothing when the retention is 0. Each run starts from the oldest again, so a job
    kept once is looked at again by the next run."""
    seconds = jobs_settings.RETENTION_SECONDS if older_than is None else older_than.total_seconds()
    size = batch or jobs_settings.PRUNE_BATCH
    total = PruneResult()
    if seconds <= 0:
        return total
    started = time.monotonic()
    after = _START
    while True:
        result = prune_batch(older_than=timedelta(seconds=seconds), batch=size, after=after)
        total.deleted += result.deleted
        total.kept += result.kept
        total.batches += 1
        if result.last is None or result.deleted + result.kept < size:
            break
        if budget_seconds is not None and time.monotonic() - started >= budget_seconds:
            break
        after = result.last
    if total.deleted:
        logger.info("pruned %d finished jobs", total.deleted, extra=_extra(total))
    return total


def _extra(result: PruneResult) -> dict[str, Any]:
    return {"pruned": result.deleted, "kept": result.kept, "batches": result.batches}
