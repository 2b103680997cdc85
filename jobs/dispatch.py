"""Who gets a broker message: the outbox row that brings a job to a worker.

Every message of `jobs.execute` is an outbox row written in the caller's transaction
(`job_enqueue_execute`), published after the commit. Whether a waiting job may have one yet
(serialization keys, concurrency caps) is admission control's decision (jobs.admission);
`batchable` says which messages the relay may pack.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import transaction

from outbox.models import OutboxEntry
from outbox.services import outbox_entry_new, outbox_publish_together, outbox_save

from . import registry, tracing
from .conf import jobs_settings
from .events import job_event_record
from .leases import Lease
from .models import Job
from .plans import in_states
from .states import ACTIVE, CLAIMABLE

EXECUTE_TASK = "jobs.execute"
EXECUTE_MANY_TASK = "jobs.execute_many"

logger = logging.getLogger(__name__)


def job_execute_message(
    job: Job | Lease,
    *,
    available_at: datetime | None = None,
    fast_path: bool | None = None,
    priority: int | None = None,
) -> OutboxEntry:
    """The (unsaved) outbox row that brings `job` to a worker.

    The message carries the job's id plus hints a worker uses to claim it in one round trip
    (generation, kind, kind version); the database row stays the only truth. `priority`:
    the message's, when not the job's own (`message_priority`)."""
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
        priority=message_priority(job) if priority is None else priority,
    )


def message_priority(job: Job | Lease) -> int:
    """The outbox priority of a job's message: the job's own (a lease carries it from the
    claim); for a job loaded without it, its kind's default, read without a query."""
    if isinstance(job, Lease):
        return job.priority
    if "priority" not in job.get_deferred_fields():
        return job.priority
    spec = registry.kind_version(job.kind, job.kind_version)
    return spec.priority if spec else 0


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
    priority: int | None = None,
) -> None:
    """The one way work reaches a worker: an outbox row in the caller's transaction."""
    outbox_save(
        job_execute_message(job, available_at=available_at, fast_path=fast_path, priority=priority)
    )


def job_republish(job: Job, *, reason: str, actor: str, fast_path: bool | None = None) -> None:
    """A new message for a waiting job whose message is lost or late, and the event that says
    who sent it and why (its state does not change). The caller holds the job's row lock and
    has checked that the job still needs it; a message too many is absorbed by the claim.

    The message goes at the top priority (registry.PRIORITY_MAX), whatever the job's own: a
    job that waited past its delivery deadline was either lost or kept back by higher bands
    in the broker, and either way it has waited long enough. This is the aging that bounds
    how long a low band can starve (docs/architecture.md, "Priorities")."""
    job_enqueue_execute(job, fast_path=fast_path, priority=registry.PRIORITY_MAX)
    job_event_record(job, from_state=job.state, to_state=job.state, reason=reason, actor=actor)


def send_again(job_ids: Sequence[UUID]) -> None:
    """A new message for each of these jobs still active (none is leased by the caller): the
    jobs a batch set aside once its budget was spent, or whose claim the database lost. A job
    that already has a message meanwhile gets a second one, which its claim absorbs."""
    with outbox_publish_together(), transaction.atomic():
        for job in in_states(Job.objects.filter(pk__in=job_ids), [s.value for s in ACTIVE]):
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
    rows = in_states(Job.objects.filter(pk__in=ours), [s.value for s in CLAIMABLE])
    lost = [pk for pk, generation in rows.values_list("pk", "generation") if generation < ours[pk]]
    if lost:
        logger.warning(
            "the database lost %d claim(s) (a failover or crash): published again",
            len(lost),
            extra={"job_ids": [str(pk) for pk in lost]},
        )
        send_again(lost)
    return lost
