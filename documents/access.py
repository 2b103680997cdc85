"""Who may submit a job naming a document: the document is the job's tenant's (both the
index kind and the ingestion pipeline check it at submission)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobs.exceptions import Forbidden
from jobs.selectors import rows_of_job_tenant

from .models import Document

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from jobs.models import Tenant


def document_index_authorize_submit(
    *, owner: User, tenant: Tenant | None, input: dict[str, Any]
) -> None:
    """At submission: the document is the job's tenant's, or nothing is accepted (404)."""
    rows = rows_of_job_tenant(Document, tenant_id=tenant.pk if tenant else None, owner_id=owner.pk)
    if not rows.filter(pk=input["document_id"]).exists():
        raise Forbidden("document not found")
