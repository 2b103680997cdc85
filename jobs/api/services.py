"""Writes the API needs besides job submission: stored objects and API tokens."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from rest_framework.authtoken.models import Token

from jobs.conf import jobs_settings
from jobs.exceptions import InputTooLarge
from jobs.models import StoredObject, Tenant

from .base import TOKEN_APP


def _content_type(declared: str | None) -> str:
    """The client's declared type if it is plain printable text, else the neutral default."""
    if not declared or not declared.isprintable() or len(declared) > 200:
        return "application/octet-stream"
    return declared


def object_store(*, owner: Any, tenant: Tenant | None, upload: UploadedFile[bytes]) -> StoredObject:
    """Keep an upload in Django storage under a fresh name and record who owns it."""
    limit = jobs_settings.MAX_OBJECT_BYTES
    if upload.size is None or upload.size > limit:
        raise InputTooLarge(f"upload is {upload.size} bytes, over JOBS_MAX_OBJECT_BYTES={limit}")
    digest = hashlib.sha256()
    for chunk in upload.chunks():
        digest.update(chunk)
    upload.seek(0)
    object_id = uuid.uuid4()
    owner_dir = f"t{tenant.pk}" if tenant else f"u{owner.pk}"
    # The name carries no client text: uploads cannot choose or guess paths.
    stored_name = default_storage.save(f"objects/{owner_dir}/{object_id}", upload)
    try:
        with transaction.atomic():
            return StoredObject.objects.create(
                id=object_id,
                tenant=tenant,
                owner=owner,
                storage_name=stored_name,
                size=upload.size,
                sha256=digest.hexdigest(),
                content_type=_content_type(upload.content_type),
            )
    except BaseException:
        default_storage.delete(stored_name)  # no orphan bytes without a row
        raise


def api_token_issue(*, username: str, tenant_name: str | None = None) -> str:
    """Create the user (and tenant membership) if needed; return the user's API token."""
    if not apps.is_installed(TOKEN_APP):
        # DRF's Token model is abstract then (no table, no `objects`).
        raise ImproperlyConfigured(
            f"API tokens need {TOKEN_APP!r} in INSTALLED_APPS (then run `manage.py migrate`); "
            "without it the API accepts session logins only"
        )
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        if tenant_name:
            tenant, _ = Tenant.objects.get_or_create(name=tenant_name)
            tenant.members.add(user)
        token, _ = Token.objects.get_or_create(user=user)
    return str(token.key)
