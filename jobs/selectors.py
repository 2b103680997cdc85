"""Reads. No writes, no transactions."""

from __future__ import annotations

from typing import IO
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.files.storage import default_storage
from django.db.models import Q, QuerySet

from .exceptions import Forbidden
from .models import Job, StoredObject, Tenant


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


def job_input_object_open(*, job_id: UUID) -> IO[bytes]:
    job = Job.objects.select_related("input_ref").get(pk=job_id)
    if job.input_ref is None:
        raise Forbidden("this job names no input object")
    return default_storage.open(job.input_ref.storage_name, "rb")
