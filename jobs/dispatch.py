"""Who gets a broker message, and when: the outbox write plus admission control.

A job normally gets its message at submission. Three rules hold some jobs back until a
running job hands over its turn, so the queue never fills with work that cannot start:
  - serialization key: only the oldest active job of a key gets a message; when it leaves
    the active states the next one of the key is enqueued (order per key, parallel across keys);
  - per-tenant cap of a kind (`tenant_limit`): at most N of a tenant's jobs of that kind are
    queued-with-a-message or leased; a flood from one tenant waits in the table, not in the
    queue in front of other tenants;
  - per-kind cap (`kind_limit`, e.g. a provider quota): the same across all tenants.
Submission and hand-over take the same advisory locks (sorted, transaction-scoped), so a
hand-over never misses a job submitted concurrently. The claim re-checks every rule under
the same locks (jobs.leases), so a duplicate or early message can never break one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from outbox.models import OutboxEntry
from outbox.services import (
    outbox_after_commit_many,
    outbox_entry_new,
    outbox_publish_together,
    outbox_save,
)

from . import prepared, registry, tracing
from .conf import jobs_settings
from .events import job_event_record
from .leases import Lease
from .models import Job
from .states import ACTIVE, CLAIMABLE, JobState

EXECUTE_TASK = "jobs.execute"
EXECUTE_MANY_TASK = "jobs.execute_many"
_WAITING_OR_LEASED = [JobState.QUEUED.value, JobState.LEASED.value]

logger = logging.getLogger(__name__)


def job_execute_message(
    job: Job | Lease,
    *,
    available_at: datetime | None = None,
    fast_path: bool | None = None,
) -> OutboxEntry:
    """The (unsaved) outbox row that brings `job` to a worker.

    The message carries the job's id plus hints a worker uses to claim it in one round trip
    (generation, kind, kind version); the database row stays the only truth."""
    job_id = job.job_id if isinstance(job, Lease) else job.pk
    return outbox_entry_new(
        task_name=EXECUTE_TASK,
        queue=execute_queue(job.kind, job.kind_version),
        job_id=job_id,
        kwargs=tracing.message_hints(
            execute_kwargs(job_id, job.generation, job.kind, job.kind_version), job
        ),
        available_at=available_at,
        fast_path=fast_path,
    )


def execute_queue(kind: str, kind_version: int) -> str:
    """The queue of a `jobs.execute` message: the kind's own, else JOBS_QUEUE."""
    spec = registry.kind_version(kind, kind_version)
    return spec.queue if spec else jobs_settings.QUEUE


def execute_kwargs(job_id: UUID, generation: int, kind: str, kind_version: int) -> dict[str, Any]:
    """The body of a `jobs.execute` message (the one spelling: single and bulk submits)."""
    return {
        "job_id": str(job_id),
        "generation": generation,
        "kind": kind,
        "kind_version": kind_version,
    }


def batch_spec(kwargs: dict[str, Any]) -> registry.KindSpec | None:
    """The kind of a `jobs.execute` message that may share a batch, else None: a kind this
    process knows, that allows it (`@handler(batch=True)`, the default) and that has no
    concurrency caps (a batch claim applies no caps; jobs.batch). A keyed job may share a
    message: the batch claim takes the head of a key and leaves the others to jobs_claim.
    The relay asks when it packs; the worker asks again (during a deploy the publisher's
    registry may disagree with the worker's: the worker's decides)."""
    kind, version = kwargs.get("kind"), kwargs.get("kind_version")
    if not isinstance(kind, str) or not isinstance(version, int):
        return None
    spec = registry.kind_version(kind, version)
    if spec is None or not spec.batch or spec.tenant_limit is not None or spec.kind_limit:
        return None
    return spec


def batchable(kwargs: dict[str, Any]) -> bool:
    """The relay's batch rule for `jobs.execute` (outbox.batching): see `batch_spec`."""
    return batch_spec(kwargs) is not None


def job_enqueue_execute(
    job: Job | Lease,
    *,
    available_at: datetime | None = None,
    fast_path: bool | None = None,
) -> None:
    """The one way work reaches a worker: an outbox row in the caller's transaction."""
    outbox_save(job_execute_message(job, available_at=available_at, fast_path=fast_path))


def job_republish(job: Job, *, reason: str, actor: str, fast_path: bool | None = None) -> None:
    """A new message for a waiting job whose message is lost or late, and the event that says
    who sent it and why (its state does not change). The caller holds the job's row lock and
    has checked that the job still needs it; a message too many is absorbed by the claim."""
    job_enqueue_execute(job, fast_path=fast_path)
    job_event_record(job, from_state=job.state, to_state=job.state, reason=reason, actor=actor)


def send_again(job_ids: Sequence[UUID]) -> None:
    """A new message for each of these jobs still active (none is leased by the caller): the
    jobs a batch set aside once its budget was spent, or whose claim the database lost. A job
    that already has a message meanwhile gets a second one, which its claim absorbs."""
    with outbox_publish_together(), transaction.atomic():
        for job in Job.objects.filter(pk__in=job_ids, state__in=[s.value for s in ACTIVE]):
            job_enqueue_execute(job)


def send_again_if_claim_lost(leases: Sequence[Lease]) -> list[UUID]:
    """The jobs of these lost leases whose claim the database no longer knows get a new
    message; returns their ids.

    A claim commits asynchronously (jobs.leases): a failover to a standby that had not
    received it, or a crash, puts the row back at an earlier generation, claimable. The
    delivery that made the claim is acked once its worker finds the lease gone, so without a
    new message only the redelivery check would find the job again. A lease lost to another
    claimer (same or higher generation) gets nothing: that claimer runs the job."""
    ours = {lease.job_id: lease.generation for lease in leases}
    rows = Job.objects.filter(pk__in=ours, state__in=[s.value for s in CLAIMABLE])
    lost = [pk for pk, generation in rows.values_list("pk", "generation") if generation < ours[pk]]
    if lost:
        logger.warning(
            "the database lost %d claim(s) (a failover or crash): published again",
            len(lost),
            extra={"job_ids": [str(pk) for pk in lost]},
        )
        send_again(lost)
    return lost


def admission_lock_keys(
    *,
    kind: str,
    tenant_id: int | None,
    serialization_key: str | None,
    spec: registry.KindSpec | None,
) -> list[str]:
    keys = []
    if serialization_key:
        keys.append(serial_lock_key(serialization_key))
    if spec is not None and spec.tenant_limit is not None and tenant_id is not None:
        keys.append(f"jobs.tenant_kind:{tenant_id}:{kind}")
    if spec is not None and spec.kind_limit is not None:
        keys.append(f"jobs.kind:{kind}")
    return sorted(keys)


def serial_lock_key(serialization_key: str) -> str:
    """The advisory lock of a serialization key (admission_lock_keys)."""
    return f"jobs.serial:{serialization_key}"


def admission_lock(
    keys: list[str], *, serialization_key: str | None = None, exclude: UUID | None = None
) -> Job | None:
    """Take the transaction-scoped advisory locks (sorted: no deadlocks), then return the
    oldest active job of `serialization_key` other than `exclude`, in one round trip
    (database function `jobs_admission_lock`, migration 0009). Its fields: id, state,
    created_at, kind, kind_version, generation, next_attempt_at."""
    if not keys:
        return None
    return head_of(_admission_lock_row(keys, serialization_key, exclude))


def _admission_lock_row(
    keys: list[str], serialization_key: str | None, exclude: UUID | None
) -> tuple[Any, ...] | None:
    return prepared.fetchone(
        "SELECT * FROM jobs_admission_lock(%s::text[], %s::text, %s::uuid)",
        [keys, serialization_key, exclude],
    )


# The head's fields, in the order of jobs_admission_lock's columns (and, prefixed with
# `next_`, of jobs_complete_many_hand_over's).
HEAD_FIELDS = ("id", "state", "created_at", "kind", "kind_version", "generation", "next_attempt_at")
_HEAD_CREATED_AT = HEAD_FIELDS.index("created_at")


def head_of(row: Sequence[Any] | None) -> Job | None:
    """The head row of jobs_admission_lock as an unsaved-looking, read-only Job."""
    if row is None or row[0] is None:
        return None
    head = Job(**dict(zip(HEAD_FIELDS, row, strict=True)))
    head._state.adding = False
    return head


def _others(job_id: UUID) -> QuerySet[Job]:
    return Job.objects.exclude(pk=job_id)


def admission_open(job: Job, spec: registry.KindSpec) -> bool:
    """At submission (inside its transaction, before or after the job's insert): may this job
    get a message now? A job not inserted yet counts as created now."""
    keys = admission_lock_keys(
        kind=job.kind, tenant_id=job.tenant_id, serialization_key=job.serialization_key, spec=spec
    )
    if not keys:
        return True
    # The head's created_at only: no Job built on this hot path.
    head = _admission_lock_row(keys, job.serialization_key, job.pk)
    created = _HEAD_CREATED_AT
    if head and head[0] is not None and head[created] <= (job.created_at or timezone.now()):
        return False
    if spec.tenant_limit is None and spec.kind_limit is None:
        return True
    others = _others(job.pk)
    if spec.tenant_limit is not None and job.tenant_id is not None:
        busy = others.filter(tenant_id=job.tenant_id, kind=job.kind, state__in=_WAITING_OR_LEASED)
        if busy.count() >= spec.tenant_limit:
            return False
    if spec.kind_limit is not None:
        busy = others.filter(kind=job.kind, state__in=_WAITING_OR_LEASED)
        if busy.count() >= spec.kind_limit:
            return False
    return True


def admission_handoff_lease(lease: Lease, *, left_active: bool) -> None:
    """`admission_handoff` for a job leaving `lease`."""
    admission_handoff(
        job_id=lease.job_id,
        kind=lease.kind,
        kind_version=lease.kind_version,
        tenant_id=lease.tenant_id,
        serialization_key=lease.serialization_key,
        left_active=left_active,
    )


def handoff_keys(
    *, kind: str, kind_version: int, tenant_id: int | None, serialization_key: str | None
) -> tuple[registry.KindSpec | None, list[str]]:
    """The admission rules a job leaving `leased` must hand over (none: nothing to do)."""
    spec = registry.kind_version(kind, kind_version) or registry.kind_latest_or_none(kind)
    keys = admission_lock_keys(
        kind=kind, tenant_id=tenant_id, serialization_key=serialization_key, spec=spec
    )
    return spec, keys


def admission_handoff(
    *,
    job_id: UUID,
    kind: str,
    kind_version: int,
    tenant_id: int | None,
    serialization_key: str | None,
    left_active: bool,
) -> None:
    """A job left `leased` (and maybe the active states): give its turn to the next in line."""
    spec, keys = handoff_keys(
        kind=kind,
        kind_version=kind_version,
        tenant_id=tenant_id,
        serialization_key=serialization_key,
    )
    if not keys:
        return
    head = admission_lock(
        keys, serialization_key=serialization_key if left_active else None, exclude=job_id
    )
    hand_over(job_id=job_id, kind=kind, tenant_id=tenant_id, spec=spec, head=head)


def hand_over(
    *,
    job_id: UUID,
    kind: str,
    tenant_id: int | None,
    spec: registry.KindSpec | None,
    head: Job | None,
) -> None:
    """With the admission locks held: enqueue the next job of the key, tenant or kind."""
    waiting = _others(job_id).filter(state=JobState.QUEUED.value).order_by("created_at", "id")
    candidates: list[Job] = []
    if head is not None and head.state != JobState.LEASED.value:
        candidates.append(head)
    if spec is not None and spec.tenant_limit is not None and tenant_id is not None:
        nxt = waiting.filter(tenant_id=tenant_id, kind=kind).first()
        if nxt is not None:
            candidates.append(nxt)
    if spec is not None and spec.kind_limit is not None:
        nxt = waiting.filter(kind=kind).first()
        if nxt is not None:
            candidates.append(nxt)
    seen: set[UUID] = set()
    for nxt in candidates:
        if nxt.pk in seen:
            continue
        seen.add(nxt.pk)
        job_enqueue_execute(nxt, available_at=nxt.next_attempt_at)


def key_only_handoff(lease: Lease) -> str | None:
    """The key's lock when a success of `lease` hands over its serialization key and no
    other rule (no caps): the hand-over jobs_complete_many_hand_over does. Else None."""
    if lease.serialization_key is None:
        return None
    _, keys = handoff_keys(
        kind=lease.kind,
        kind_version=lease.kind_version,
        tenant_id=lease.tenant_id,
        serialization_key=lease.serialization_key,
    )
    key = serial_lock_key(lease.serialization_key)
    return key if keys == [key] else None


def next_heads_enqueue(heads: Sequence[Job | None]) -> None:
    """With their keys' locks held: a message for each next head not leased (a leased one
    runs already), all rows in one INSERT; published after the commit (the fast path)."""
    messages = [
        job_execute_message(head, available_at=head.next_attempt_at)
        for head in heads
        if head is not None and head.state != JobState.LEASED.value
    ]
    if messages:
        OutboxEntry.objects.bulk_create(messages)
        outbox_after_commit_many(messages)
