"""Follow-up jobs (`ctx.submit`) and fan-in (`after=`): how jobs name other jobs.

A follow-up is a job a handler asks for (`JobContext.submit`): checked when asked, written by
the completion that records its parent's success, in that transaction (jobs.lifecycle). A
parent whose success does not commit (an error, a retry, a lost lease) submits nothing. The
follow-up's `parent` is the job that submitted it.

Fan-in: a job submitted with `after=[ids]` is written `waiting` (shown to clients as queued,
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

from django.contrib.auth import get_user_model
from django.db import connection

from .exceptions import InvalidDependency
from .ids import uuid7
from .models import Job, JobDependency, Tenant
from .rows import CheckedSubmit, SubmitRequest
from .states import TERMINAL

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from .context import JobContext
    from .leases import Lease

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


# `ctx.submit(tenant=INHERIT)`: the parent's tenant (None is "no tenant": a personal job).
INHERIT: Any = type("Inherit", (), {"__repr__": lambda self: "INHERIT"})()


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
    from .submission import logical_scope

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


# -- follow-ups ------------------------------------------------------------------------------


def scope_rows(*, owner_id: int, tenant_id: int | None) -> tuple[User, Tenant | None]:
    """A job's owner and tenant as rows, for its follow-ups' checks and rows."""
    owner = get_user_model().objects.get(pk=owner_id)
    tenant = None if tenant_id is None else Tenant.objects.get(pk=tenant_id)
    return owner, tenant


def follow_up_check(
    ctx: JobContext,
    *,
    owner: User | None,
    tenant: Tenant | object | None,
    after: Sequence[Any],
    **fields: Any,
) -> CheckedSubmit:
    """`ctx.submit`'s request, checked as `jobs.submit` checks one, with a new id and its
    parent; each id of `after` names an earlier follow-up of `ctx` or an existing job of the
    follow-up's scope (InvalidDependency, raised in the handler)."""
    from .submission import job_check, logical_scope

    parent_owner, parent_tenant = ctx.job_scope()
    owner = parent_owner if owner is None else owner
    tenant = parent_tenant if tenant is INHERIT else tenant
    assert tenant is None or isinstance(tenant, Tenant)
    parent = Job(pk=ctx.job_id)
    parent._state.adding = False
    request = SubmitRequest(
        input_ref=None,
        replay_of=None,
        owner=owner,
        tenant=tenant,
        after=after,
        parent=parent,
        job_id=uuid7(),
        **fields,
    )
    checked = job_check(request)
    siblings = {s.request.job_id for s in ctx.follow_ups}
    existing = [pk for pk in checked.request.after if pk not in siblings]
    if existing:
        scope = logical_scope(owner_id=owner.pk, tenant_id=tenant.pk if tenant else None)
        found = set(Job.objects.filter(scope, pk__in=existing).values_list("pk", flat=True))
        missing = [str(pk) for pk in existing if pk not in found]
        if missing:
            raise InvalidDependency(
                f"after: no job {', '.join(missing[:5])} in the follow-up's tenant (or the "
                "owner's personal jobs), nor among this handler's follow-ups"
            )
    return checked


def follow_ups_write(lease: Lease, follow_ups: Sequence[CheckedSubmit]) -> list[Job]:
    """In the transaction of `lease`'s success, after its fenced update applied: write the
    follow-ups (jobs.bulk_submit.jobs_submit_checked: the one row builder)."""
    from .bulk_submit import jobs_submit_checked

    if not follow_ups:
        return []
    if not connection.in_atomic_block:
        raise RuntimeError("follow-ups are written inside their parent's success transaction")
    assert all(
        s.request.parent is not None and s.request.parent.pk == lease.job_id for s in follow_ups
    )
    return jobs_submit_checked(follow_ups)
