"""Reads. No writes, no transactions."""

from __future__ import annotations

from datetime import datetime
from typing import IO
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.files.storage import default_storage
from django.db import connection
from django.db.models import Model, Q, QuerySet

from .exceptions import Forbidden
from .models import Job, StoredObject, Tenant


def db_now() -> datetime:
    """The database's clock (its transaction's `now()` inside one): what leases and due
    times are stamped with."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        row = cursor.fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def user_tenant_ids(user: AbstractBaseUser | AnonymousUser) -> list[int]:
    if not user.is_authenticated:
        return []
    return list(Tenant.objects.filter(members=user.pk).values_list("id", flat=True))


def jobs_visible_to(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    """Current membership decides: own jobs without a tenant, and jobs of the user's tenants."""
    if not user.is_authenticated or not user.is_active:
        return Job.objects.none()
    return Job.objects.filter(
        Q(tenant__isnull=True, owner_id=user.pk) | Q(tenant_id__in=user_tenant_ids(user))
    )


def objects_visible_to(user: AbstractBaseUser | AnonymousUser) -> QuerySet[StoredObject]:
    if not user.is_authenticated or not user.is_active:
        return StoredObject.objects.none()
    return StoredObject.objects.filter(
        Q(tenant__isnull=True, owner_id=user.pk) | Q(tenant_id__in=user_tenant_ids(user))
    )


def job_owner_has_access(*, job_id: UUID) -> bool:
    """The submitting user is active and, for a tenant job, still a member of the tenant."""
    job = Job.objects.select_related("owner").filter(pk=job_id).first()
    if job is None or not job.owner.is_active:
        return False
    if job.tenant_id is None:
        return True
    return job.owner.tenants.filter(pk=job.tenant_id).exists()


def rows_of_job_tenant[M: Model](
    source: type[M] | QuerySet[M],
    *,
    tenant_id: int | None,
    owner_id: int,
    tenant_field: str = "tenant",
    owner_field: str | None = "owner",
) -> QuerySet[M]:
    """Rows that belong to a job's tenant; for a personal job, its owner's rows with no tenant.

    The rule of the submit path (`object_for_job_or_404`). `tenant_field` and `owner_field` are
    lookups, so a row can belong through a relation (`"document__tenant"`). Without an
    `owner_field` a personal job owns nothing: a row with no tenant is nobody's in particular.
    """
    rows = source._default_manager.all() if isinstance(source, type) else source
    if tenant_id is not None:
        return rows.filter(**{tenant_field: tenant_id})
    if owner_field is None:
        return rows.none()
    return rows.filter(**{f"{tenant_field}__isnull": True, owner_field: owner_id})


def job_input_object_open(*, job_id: UUID, tenant_id: int | None, owner_id: int) -> IO[bytes]:
    """The job's `input_ref`, only if it belongs to the job's tenant (the job row is data)."""
    found = (
        rows_of_job_tenant(StoredObject, tenant_id=tenant_id, owner_id=owner_id)
        .filter(jobs__pk=job_id)
        .first()
    )
    if found is None:
        # No input_ref, or another tenant's object: one answer, which says nothing about it.
        raise Forbidden("the job has no input object in its tenant")
    return default_storage.open(found.storage_name, "rb")


def logical_scope(*, owner_id: int, tenant_id: int | None) -> Q:
    """Where a business key is unique: the tenant, or the owner for personal jobs."""
    if tenant_id is not None:
        return Q(tenant_id=tenant_id)
    return Q(tenant__isnull=True, owner_id=owner_id)
