"""Follow-up jobs (`ctx.submit`): a job a handler asks for, checked when asked, written by
the completion that records its parent's success, in that transaction (jobs.lifecycle). A
parent whose success does not commit (an error, a retry, a lost lease) submits nothing. The
follow-up's `parent` is the job that submitted it; `after=` may name its siblings (fan-in:
jobs.links).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import connection

from .bulk_submit import jobs_submit_checked
from .exceptions import InvalidDependency
from .ids import uuid7
from .models import Job, Tenant
from .rows import CheckedSubmit, SubmitRequest
from .selectors import logical_scope
from .submission import job_check

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from .leases import Lease

# `ctx.submit(tenant=INHERIT)`: the parent's tenant (None is "no tenant": a personal job).
INHERIT: Any = type("Inherit", (), {"__repr__": lambda self: "INHERIT"})()


def scope_rows(*, owner_id: int, tenant_id: int | None) -> tuple[User, Tenant | None]:
    """A job's owner and tenant as rows, for its follow-ups' checks and rows."""
    owner = get_user_model().objects.get(pk=owner_id)
    tenant = None if tenant_id is None else Tenant.objects.get(pk=tenant_id)
    return owner, tenant


def follow_up_check(
    *,
    parent_id: UUID,
    parent_scope: tuple[User, Tenant | None],
    siblings: set[UUID],
    owner: User | None,
    tenant: Tenant | object | None,
    after: Sequence[Any],
    **fields: Any,
) -> CheckedSubmit:
    """`ctx.submit`'s request, checked as `jobs.submit` checks one, with a new id and its
    parent; each id of `after` names an earlier follow-up of the parent (`siblings`) or an
    existing job of the follow-up's scope (InvalidDependency, raised in the handler). The
    owner and tenant are the parent's (`parent_scope`) unless given."""
    parent_owner, parent_tenant = parent_scope
    owner = parent_owner if owner is None else owner
    tenant = parent_tenant if tenant is INHERIT else tenant
    assert tenant is None or isinstance(tenant, Tenant)
    parent = Job(pk=parent_id)
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
    if not follow_ups:
        return []
    if not connection.in_atomic_block:
        raise RuntimeError("follow-ups are written inside their parent's success transaction")
    assert all(
        s.request.parent is not None and s.request.parent.pk == lease.job_id for s in follow_ups
    )
    return jobs_submit_checked(follow_ups)
