"""Reads the API needs on top of jobs.selectors: tenant choice and visible objects."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from rest_framework.exceptions import APIException, NotFound, ValidationError

from jobs.models import Job, StoredObject, Tenant
from jobs.selectors import jobs_visible_to, objects_visible_to

from .fields import UUID_PATTERN

NO_SUCH_TENANT = "no tenant of that name among yours"


def tenant_for_submission(
    *, user: AbstractBaseUser | AnonymousUser, name: str | None
) -> Tenant | None:
    """The tenant a submission goes to: the named one (if a member) or the user's only one.

    A tenant the user does not belong to is a 404 like one that does not exist (and like an
    `input_ref` of another tenant), so names cannot be probed. None: a personal job (the user
    belongs to no tenant).
    """
    mine = Tenant.objects.filter(members__pk=user.pk or 0)
    if name:
        tenant = mine.filter(name=name).first()
        if tenant is None:
            raise NotFound(NO_SUCH_TENANT)
        return tenant
    tenants = list(mine.order_by("name")[:2])
    if len(tenants) > 1:
        raise ValidationError(
            {"tenant": ["you belong to several tenants: name one in `tenant`"]}, code="required"
        )
    return tenants[0] if tenants else None


def tenant_for_submission_or_none(
    *, user: AbstractBaseUser | AnonymousUser, name: str | None
) -> Tenant | None:
    try:
        return tenant_for_submission(user=user, name=name)
    except APIException:
        return None


def uuid_or_none(value: str | UUID) -> UUID | None:
    """The UUID in its canonical spelling (the schema's `format: uuid`); anything else is None."""
    if isinstance(value, UUID):
        return value
    return UUID(value) if re.fullmatch(UUID_PATTERN, value) else None


def job_visible_or_404(*, user: AbstractBaseUser | AnonymousUser, job_id: str | UUID) -> Job:
    """The job if the caller may see it now (current membership); 404 otherwise, never 403."""
    pk = uuid_or_none(job_id)
    job = jobs_visible_to(user).filter(pk=pk).first() if pk else None
    if job is None:
        raise NotFound("job not found")
    return job


def object_for_job_or_404(
    *, user: AbstractBaseUser | AnonymousUser, object_id: UUID, tenant: Tenant | None
) -> StoredObject:
    """An object the caller may read AND that belongs to the job's tenant (or is personal)."""
    found = objects_visible_to(user).filter(pk=object_id).first()
    if found is None or found.tenant_id != (tenant.pk if tenant else None):
        raise NotFound("object not found")
    if found.tenant_id is None and found.owner_id != user.pk:
        raise NotFound("object not found")
    return found


def job_wait_for_status_change(
    *,
    user: AbstractBaseUser | AnonymousUser,
    job: Job,
    wait: float,
    interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Job:
    """Long-poll: re-read the job every `interval` until its client status changes or `wait` ends.

    Each read goes through current visibility, so a caller removed from the tenant mid-wait
    gets a 404 instead of the next status.
    """
    from jobs.states import CLIENT_STATUS, FINISHED, JobState

    initial = CLIENT_STATUS[JobState(job.state)]
    deadline = clock() + wait
    while JobState(job.state) not in FINISHED:
        remaining = deadline - clock()
        if remaining <= 0:
            break
        sleep(min(interval, remaining))
        job = job_visible_or_404(user=user, job_id=job.pk)
        if CLIENT_STATUS[JobState(job.state)] != initial:
            break
    return job


def jobs_with_children_count(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """`jobs` with `children_count` (the jobs each one's handler submitted), in the same
    query: one probe of jobs_job_parent_idx per row."""
    children = (
        Job.objects.filter(parent_id=OuterRef("pk"))
        .order_by()
        .values("parent_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return jobs.annotate(children_count=Coalesce(Subquery(children), 0))
