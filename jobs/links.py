"""Fan-in (`after=`): a job that waits for other jobs (follow-ups, `ctx.submit`, are
jobs.follow_ups).

A job a job submitted with `after=[ids]` is written `waiting` (shown to clients as queued,
with `waiting_for`), with one JobDependency row per id and a dormant outbox row (due at
`DORMANT_AT`, which no relay sweep reaches). Waiting, it is never claimed: no claim takes a
waiting row, and no message of it is published. The database releases it, whatever path
ends its dependencies (a worker's success or group commit, a quarantine discarded by an
operator, a cancel, a supersede): the trigger jobs_job_after_state (jobs/sql) runs when a job
that has waiters enters a final state and counts each waiter's `waiting_for` down under the
waiter's row lock (jobs_dependency_ended); the last one moves it to `queued` and makes its
outbox row due now, in the same transaction, so the relay's next sweep publishes it.

"Ended" is final: succeeded, failed or cancelled. A quarantined dependency has not ended (an
operator may still redrive it): its waiters wait for the operator's decision. A dependency
that ends failed or cancelled counts as ended (`after_failure="run"`, the default: the waiter
runs and reads every outcome with `ctx.dependencies()`), or cancels the waiter at once
(`after_failure="cancel"`; the cancel ends it, so its own waiters are released in turn).
`after` names existing jobs only, so a cycle cannot be written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import connection

from .exceptions import InvalidDependency
from .models import Job, JobDependency
from .selectors import logical_scope
from .states import TERMINAL

if TYPE_CHECKING:
    pass

# The due time of a waiting job's outbox row until its release makes it due.
DORMANT_AT = datetime(9999, 12, 31, tzinfo=UTC)
AFTER_FAILURE_CHOICES = ("run", "cancel")
# A waiter's dependencies at most: each one's end locks the waiter's row once.
MAX_AFTER = 10_000

# What counting down may change on the waiter's row.
_RELEASE_FIELDS = [
    "state",
    "waiting_for",
    "next_attempt_at",
    "deadline",
    "finished_at",
    "error_category",
    "error_message",
    "updated_at",
]
_ENDED_SQL = (
    "SELECT jobs_dependency_ended(%s::uuid, d.id, d.state, %s::boolean) "
    "FROM unnest(%s::uuid[], %s::text[]) AS d(id, state)"
)


def after_check(after: Sequence[Any], after_failure: str) -> tuple[UUID, ...]:
    """`after` as job ids, each once, in the order given; InvalidDependency for a malformed
    id, too many of them or an unknown `after_failure`."""
    if after_failure not in AFTER_FAILURE_CHOICES:
        raise InvalidDependency(
            f"after_failure must be one of {', '.join(AFTER_FAILURE_CHOICES)}, "
            f"not {after_failure!r}"
        )
    if isinstance(after, (str, bytes, UUID)):
        raise InvalidDependency("after must be a list of job ids")
    ids: dict[UUID, None] = {}
    for value in after:
        try:
            ids[value if isinstance(value, UUID) else UUID(str(value))] = None
        except (TypeError, ValueError, AttributeError):
            raise InvalidDependency(f"after: {str(value)[:60]!r} is not a job id") from None
    if len(ids) > MAX_AFTER:
        raise InvalidDependency(f"after names {len(ids)} jobs; at most {MAX_AFTER}")
    return tuple(ids)


def dependencies_record(waiter: Job, after: Sequence[UUID], *, after_failure: str) -> None:
    """In the waiter's transaction, after its row: lock the dependencies (of the waiter's
    scope: its tenant, or its owner's personal jobs) and mark them `has_waiters`, write the
    edges, then count down the ones that ended already (all of them: released now).

    The row locks order this against a dependency's end: one that commits first is read
    here as ended; one that commits later finds the edges and counts down itself."""
    scope = logical_scope(owner_id=waiter.owner_id, tenant_id=waiter.tenant_id)
    found = dict(
        Job.objects.select_for_update(no_key=True)
        .filter(scope, pk__in=after)
        .exclude(pk=waiter.pk)
        .order_by("pk")
        .values_list("pk", "state")
    )
    missing = [str(pk) for pk in after if pk not in found]
    if missing:
        raise InvalidDependency(
            f"after: no job {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
            "in this job's tenant (or the owner's personal jobs)"
        )
    final = {s.value for s in TERMINAL}
    ended = [(pk, state) for pk, state in found.items() if state in final]
    open_ = [pk for pk, state in found.items() if state not in final]
    if open_:
        Job.objects.filter(pk__in=open_, has_waiters=False).update(has_waiters=True)
    cancel = after_failure == "cancel"
    JobDependency.objects.bulk_create(
        JobDependency(waiter=waiter, dependency_id=pk, cancel_on_failure=cancel) for pk in after
    )
    if ended:
        with connection.cursor() as cursor:
            cursor.execute(
                _ENDED_SQL, [waiter.pk, cancel, [pk for pk, _ in ended], [s for _, s in ended]]
            )
        waiter.refresh_from_db(fields=_RELEASE_FIELDS)


@dataclass(frozen=True)
class Dependency:
    """What a waiter may read of a job it waited for: its outcome, never its input."""

    id: UUID
    kind: str
    state: str
    result: dict[str, Any] | None
    error_category: str
    error_message: str


def dependencies_of(job_id: UUID) -> list[Dependency]:
    """The outcomes of the jobs `job_id` waited for, in the order of their ids (one query)."""
    rows = (
        Job.objects.filter(waiter_links__waiter_id=job_id)
        .order_by("pk")
        .values_list("pk", "kind", "state", "result", "error_category", "error_message")
    )
    return [Dependency(*row) for row in rows]
