"""`document.index`: pinned version in, conditional publish out (seed 000's worked design)."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from jobs.context import JobContext
from jobs.exceptions import PermanentError
from jobs.registry import handler

from .access import document_index_authorize_submit
from .models import Document
from .services import document_index_publish_if_newer

if TYPE_CHECKING:
    pass

INDEX_SCHEMA = {
    "type": "object",
    "properties": {
        "document_id": {"type": "integer", "minimum": 1},
        "work_seconds": {"type": "number", "minimum": 0, "maximum": 60},
    },
    "required": ["document_id"],
    "additionalProperties": False,
}


def index_terms(text: str, *, limit: int = 50) -> dict[str, int]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return dict(Counter(words).most_common(limit))


@handler(
    "document.index",
    max_attempts=5,
    lease_seconds=15,
    base_delay=0.2,
    max_delay=5,
    responsible="search-team",
    input_schema=INDEX_SCHEMA,
    authorize_submit=document_index_authorize_submit,
)
def document_index(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    # document_id is data: anyone who may submit could name another tenant's document. Load it
    # only from this job's tenant (re-checking access first); otherwise Forbidden, no retry.
    document = ctx.get_for_tenant(Document, input["document_id"])
    revision = document.revisions.filter(version=ctx.input_version).first()
    if revision is None:
        raise PermanentError(f"document revision v{ctx.input_version} does not exist")
    terms = index_terms(revision.text)
    if input.get("work_seconds"):
        time.sleep(float(input["work_seconds"]))
    document_id, version, job_id = revision.document_id, revision.version, ctx.job_id

    def publish(_key: str) -> dict[str, Any]:
        applied = document_index_publish_if_newer(
            document_id=document_id, version=version, terms=terms, job_id=job_id
        )
        return {"published": applied, "version": version}

    ctx.local_effect("publish_index", publish)
    return {"document_id": document_id, "version": version, "terms": len(terms)}


from . import ingest  # noqa: E402,F401  (the ingestion pipeline: document.ingest and its follow-ups)
