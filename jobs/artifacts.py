"""Write-once artifacts under a stable name derived from job id, input version and name."""

from __future__ import annotations

import hashlib
from uuid import UUID

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from .exceptions import PermanentError


def artifact_name(*, job_id: UUID, input_version: int, name: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:100]
    return f"artifacts/{job_id}/v{input_version}/{safe}"


def artifact_write_once(*, job_id: UUID, input_version: int, name: str, data: bytes) -> str:
    """Store `data` once; a retry finds the stored file and reuses it (same bytes required)."""
    path = artifact_name(job_id=job_id, input_version=input_version, name=name)
    if default_storage.exists(path):
        with default_storage.open(path, "rb") as stored:
            existing = stored.read()
        if hashlib.sha256(existing).digest() != hashlib.sha256(data).digest():
            raise PermanentError(
                f"artifact {name} already stored with different content: handler is not "
                "deterministic for one input version"
            )
        return path
    saved = default_storage.save(path, ContentFile(data))
    if saved != path:  # a concurrent writer won the name; ours got a suffix: drop it
        default_storage.delete(saved)
    return path
