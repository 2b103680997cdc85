"""Reads for documents: which documents a user may work on."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

from jobs.selectors import user_tenant_ids

from .models import Document


def documents_visible_to(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Document]:
    """The jobs rule: documents of the user's tenants, and the user's own untenanted ones."""
    if not user.is_authenticated or not user.is_active:
        return Document.objects.none()
    return Document.objects.filter(
        Q(tenant__isnull=True, owner_id=user.pk) | Q(tenant_id__in=user_tenant_ids(user))
    )
