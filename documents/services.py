"""Writes for documents: revise (and enqueue indexing), publish an index conditionally."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F

import jobs
from jobs.exceptions import Forbidden
from jobs.models import Job, Tenant

from .models import Document, DocumentIndexLog, DocumentRevision
from .selectors import documents_visible_to

INDEX_KIND = "document.index"


def document_create(*, owner: User, title: str, tenant: Tenant | None = None) -> Document:
    return Document.objects.create(owner=owner, title=title, tenant=tenant)


def document_revise(
    *,
    document: Document,
    text: str,
    actor: User,
    serialize: bool = True,
    work_seconds: float = 0.0,
) -> tuple[DocumentRevision, Job]:
    """A new revision and the job that indexes it commit together.

    The job pins document_id and input_version; business_key is the document, so a newer
    version supersedes queued older ones; with `serialize`, versions of one document also
    run one at a time, in order. Only a member of the document's tenant (for an untenanted
    document, its owner) may revise it: anyone else gets Forbidden and nothing is written.
    """
    if not documents_visible_to(actor).filter(pk=document.pk).exists():
        raise Forbidden("document not found")
    with transaction.atomic():
        Document.objects.filter(pk=document.pk).update(current_version=F("current_version") + 1)
        document.refresh_from_db(fields=["current_version"])
        revision = DocumentRevision.objects.create(
            document=document, version=document.current_version, text=text
        )
        job_input: dict[str, Any] = {"document_id": document.pk}
        if work_seconds:
            job_input["work_seconds"] = work_seconds
        job = jobs.submit(
            kind=INDEX_KIND,
            input=job_input,
            owner=actor,
            tenant=document.tenant,
            business_key=f"document:{document.pk}",
            input_version=revision.version,
            serialization_key=f"document:{document.pk}" if serialize else None,
        )
    return revision, job


_PUBLISH_SQL = """
INSERT INTO documents_documentindex (document_id, version, terms, job_id, updated_at)
VALUES (%s, %s, %s::jsonb, %s, now())
ON CONFLICT (document_id) DO UPDATE
    SET version = EXCLUDED.version, terms = EXCLUDED.terms, job_id = EXCLUDED.job_id,
        updated_at = now()
    WHERE documents_documentindex.version < EXCLUDED.version
RETURNING version
"""


def document_index_publish_if_newer(
    *, document_id: int, version: int, terms: dict[str, int], job_id: UUID
) -> bool:
    """Conditional version change: an older completion can never overwrite a newer index."""
    with connection.cursor() as cursor:
        cursor.execute(_PUBLISH_SQL, [document_id, version, json.dumps(terms), job_id])
        applied = cursor.fetchone() is not None
    DocumentIndexLog.objects.create(
        document_id=document_id, version=version, applied=applied, job_id=job_id
    )
    return applied
