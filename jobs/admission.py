"""Admission control: which waiting job may get a broker message, and the hand-over of a turn.

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
the same locks (jobs.claims), so a duplicate or early message can never break one.

Every admission statement is here: the submit's check (`admission_open`, or inside the keyed
submit's INSERT: `insert_admitted`), a success's completion that hands its key over
(`complete_and_hand_over`, `complete_many_handing_over`) and every other hand-over
(`admission_handoff`). The locks and the head of a key come from the database function
jobs_admission_lock; rows are read by column name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Model, QuerySet
from django.utils import timezone

from outbox.models import OutboxEntry
from outbox.services import outbox_after_commit_many

from . import inserts, prepared, registry
from .completion import COMPLETE_MANY_CALL, Completion, complete_params
from .dispatch import job_enqueue_execute, job_execute_message
from .leases import Lease, lease_lost
from .models import Job
from .states import JobState

_WAITING_OR_LEASED = [JobState.QUEUED.value, JobState.LEASED.value]

_ADMISSION_LOCK_SQL = "SELECT * FROM jobs_admission_lock(%s::text[], %s::text, %s::uuid)"
# A keyed completion: the completion, then the admission locks and the head of
# jobs_admission_lock, in one round trip. The lateral call's arguments depend on the
# completion's answer, so it runs after it: the job's row lock before the advisory locks,
# the order every other hand-over (cancel, quarantine) takes them in.
_COMPLETE_AND_LOCK_SQL = (
    f"SELECT c.ok, h.* FROM (SELECT count(*) > 0 AS ok FROM {COMPLETE_MANY_CALL}) c "
    "LEFT JOIN LATERAL jobs_admission_lock("
    "CASE WHEN c.ok THEN %s::text[] ELSE '{}'::text[] END, "
    "CASE WHEN c.ok THEN %s::text END, %s::uuid) AS h ON true"
)
# Keyed completions of a group commit: completion, key locks and next heads in one call
# (jobs/sql/jobs_complete_many_hand_over.sql).
_COMPLETE_MANY_HAND_OVER_SQL = (
    "SELECT * FROM jobs_complete_many_hand_over("
    "%s::uuid[], %s::bigint[], %s::text, %s::int[], %s::jsonb[], %s::text[])"
)
# A keyed submit's admission, read by the outbox row's INSERT (`insert_admitted`).
_ADMITTED_CTE = (
    "WITH admitted AS MATERIALIZED (SELECT NOT EXISTS ("
    "SELECT 1 FROM jobs_admission_lock(%s::text[], %s::text, %s::uuid) AS head "
    "WHERE head.id IS NOT NULL AND head.created_at <= %s::timestamptz) AS ok)"
)

# The head's columns in jobs_admission_lock (and, prefixed with `next_`, in
# jobs_complete_many_hand_over).
_HEAD_FIELDS = (
    "id",
    "state",
    "created_at",
    "kind",
    "kind_version",
    "generation",
    "next_attempt_at",
    "priority",
)


def admission_lock_keys(
    *,
    kind: str,
    tenant_id: int | None,
    serialization_key: str | None,
    spec: registry.KindSpec | None,
) -> list[str]:
    """The advisory locks of a job's admission rules, sorted (the order jobs_claim_lock_keys
    takes them in); none: the job has no rule."""
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


def _admission_lock_row(
    keys: list[str], serialization_key: str | None, exclude: UUID | None
) -> dict[str, Any] | None:
    """Take the transaction-scoped advisory locks (sorted: no deadlocks), then return the
    oldest active job of `serialization_key` other than `exclude`, in one round trip
    (database function `jobs_admission_lock`), by column name."""
    return prepared.fetchone_named(_ADMISSION_LOCK_SQL, [keys, serialization_key, exclude])


def _head_of(row: Mapping[str, Any] | None, *, prefix: str = "") -> Job | None:
    """The head in a row of jobs_admission_lock (its columns named `prefix` + field) as a
    read-only Job, or None (no row, or a row with no head)."""
    if row is None or row[f"{prefix}id"] is None:
        return None
    head = Job(**{name: row[f"{prefix}{name}"] for name in _HEAD_FIELDS})
    head._state.adding = False
    return head


def _others(job_id: UUID) -> QuerySet[Job]:
    return Job.objects.exclude(pk=job_id)


def _job_id(job: Job | Lease) -> UUID:
    return job.job_id if isinstance(job, Lease) else job.pk


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
    if head and head["id"] is not None and head["created_at"] <= (job.created_at or timezone.now()):
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


def insert_admitted(
    job: Job, accepted: Model, message: OutboxEntry, *, lock_keys: list[str], serialization_key: str
) -> bool:
    """A keyed submission in ONE statement (its own transaction): the job and its event
    always, the outbox row only if the key admits the job. `jobs_admission_lock` takes the
    key's lock and, with a snapshot of its own, looks for an older active job of the key (so
    it sees whatever the lock's previous holder committed); the outbox row's SELECT reads its
    answer. True when the row was written (its primary key is then set)."""
    job_sql, job_values = inserts.insert_sql(job, returning=False)
    event_sql, event_values = inserts.insert_sql(accepted, returning=False)
    message_sql, message_values = inserts.insert_sql(message, returning=True)
    into, found, rest = message_sql.partition(" VALUES (")
    values, found_returning, returning = rest.rpartition(") RETURNING ")
    if not found or not found_returning:
        raise ValueError(f"unexpected INSERT of {message._meta.label}: {message_sql[:80]}")
    sql = (
        f"{_ADMITTED_CTE}, r0 AS ({job_sql}), r1 AS ({event_sql}) "
        f"{into} SELECT {values} FROM admitted WHERE admitted.ok RETURNING {returning}"
    )
    params = [lock_keys, serialization_key, job.pk, getattr(job, "created_at", None)]
    row = prepared.fetchone_named(sql, [*params, *job_values, *event_values, *message_values])
    inserts.mark_saved(job, accepted)
    if row is None:
        return False
    inserts.mark_saved(message, returned=row)
    return True


def handoff_keys(job: Job | Lease) -> tuple[registry.KindSpec | None, list[str]]:
    """The admission rules a job leaving `leased` must hand over (none: nothing to do)."""
    spec = registry.kind_version(job.kind, job.kind_version) or registry.kind_latest_or_none(
        job.kind
    )
    keys = admission_lock_keys(
        kind=job.kind, tenant_id=job.tenant_id, serialization_key=job.serialization_key, spec=spec
    )
    return spec, keys


def admission_handoff(job: Job | Lease, *, left_active: bool) -> None:
    """A job left `leased` (and maybe the active states), or a waiting job left the active
    states: give its turn (serialization key, concurrency caps) to the next in line."""
    spec, keys = handoff_keys(job)
    if not keys:
        return
    serialization_key = job.serialization_key if left_active else None
    head = _head_of(_admission_lock_row(keys, serialization_key, _job_id(job)))
    _hand_over(job, spec=spec, head=head)


def _hand_over(job: Job | Lease, *, spec: registry.KindSpec | None, head: Job | None) -> None:
    """With the admission locks held: enqueue the next job of the key, tenant or kind."""
    waiting = _others(_job_id(job)).filter(state=JobState.QUEUED.value).order_by("created_at", "id")
    candidates: list[Job] = []
    if head is not None and head.state != JobState.LEASED.value:
        candidates.append(head)
    if spec is not None and spec.tenant_limit is not None and job.tenant_id is not None:
        nxt = waiting.filter(tenant_id=job.tenant_id, kind=job.kind).first()
        if nxt is not None:
            candidates.append(nxt)
    if spec is not None and spec.kind_limit is not None:
        nxt = waiting.filter(kind=job.kind).first()
        if nxt is not None:
            candidates.append(nxt)
    seen: set[UUID] = set()
    for nxt in candidates:
        if nxt.pk in seen:
            continue
        seen.add(nxt.pk)
        job_enqueue_execute(nxt, available_at=nxt.next_attempt_at)


def complete_and_hand_over(
    lease: Lease, result: dict[str, Any], *, spec: registry.KindSpec | None, keys: list[str]
) -> None:
    """Success of a job with admission rules (`handoff_keys`), in the caller's transaction:
    the completion, the locks and the key's next head in one statement, then the hand-over.
    A lost lease raises LeaseLost."""
    row = prepared.fetchone_named(
        _COMPLETE_AND_LOCK_SQL,
        [
            *complete_params([Completion(lease, result)]),
            keys,
            lease.serialization_key,
            lease.job_id,
        ],
    )
    if not row or not row["ok"]:
        raise lease_lost(lease)
    _hand_over(lease, spec=spec, head=_head_of(row))


def key_only_handoff(lease: Lease) -> str | None:
    """The key's lock when a success of `lease` hands over its serialization key and no
    other rule (no caps): the hand-over jobs_complete_many_hand_over does. Else None."""
    if lease.serialization_key is None:
        return None
    _, keys = handoff_keys(lease)
    key = serial_lock_key(lease.serialization_key)
    return key if keys == [key] else None


def _handoff_key(lease: Lease) -> str | None:
    """The lock a success of `lease` hands over in `complete_many_handing_over`: its key's
    (None: unkeyed). A keyed job with caps hands over through `job_complete`: ValueError."""
    if lease.serialization_key is None:
        return None
    key = key_only_handoff(lease)
    if key is None:
        raise ValueError(f"{lease.kind}: a success with caps hands over through job_complete")
    return key


def complete_many_handing_over(completions: list[Completion]) -> set[UUID]:
    """`complete_many` for jobs some of which hold a serialization key (none with caps:
    `_handoff_key`): in the caller's transaction, one statement completes them all, takes
    the completed keys' locks and finds each key's next head; each head not leased gets its
    message (one INSERT for all). Returns the ids completed."""
    if not completions:
        return set()
    if not connection.in_atomic_block:
        raise RuntimeError("a keyed group completion runs inside the group commit's transaction")
    rows = prepared.fetchall(
        _COMPLETE_MANY_HAND_OVER_SQL,
        [*complete_params(completions), [_handoff_key(c.lease) for c in completions]],
    )
    _next_heads_enqueue([_head_of(row, prefix="next_") for row in rows])
    return {row["id"] for row in rows}


def _next_heads_enqueue(heads: Sequence[Job | None]) -> None:
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
