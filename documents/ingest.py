"""Document ingestion, the worked example of follow-ups and fan-in (jobs.links):

  document.ingest (one revision) -> ctx.submit: N x document.index_chunk (a span of words each)
                                 -> ctx.submit: one document.summarize, after= the N chunks

The N chunk jobs and the summary commit with the ingest's success, in its transaction: an
ingest attempt that crashes, fails or loses its lease submits nothing, and its retry submits
them once. The summary waits (`waiting`, shown as queued) until every chunk job ended; the
database releases it when the last one does, on whichever worker; it then reads the chunks'
outcomes (`ctx.dependencies()`, their results, never their inputs) and writes one
DocumentSummary. Every write is a local effect: once per job, in its completion. A chunk that
fails for good (quarantined, then discarded by an operator) is counted as not indexed: the
summary runs anyway (`after_failure="run"`) over the chunks that were.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

from jobs.context import JobContext
from jobs.exceptions import PermanentError
from jobs.registry import handler

from .access import document_index_authorize_submit
from .models import Document, DocumentChunkIndex, DocumentRevision, DocumentSummary

CHUNK_WORDS = 50
TOP_TERMS = 20
_POLICY: dict[str, Any] = {
    "max_attempts": 5,
    "lease_seconds": 6,
    "base_delay": 0.2,
    "max_delay": 2,
    "responsible": "search-team",
}
_WORK = {"type": "number", "minimum": 0, "maximum": 60}  # seconds each step pretends to work
_DOCUMENT = {"type": "integer", "minimum": 1}
INGEST_SCHEMA = {
    "type": "object",
    "properties": {
        "document_id": _DOCUMENT,
        "chunk_words": {"type": "integer", "minimum": 1, "maximum": 100_000},
        "work_seconds": _WORK,
    },
    "required": ["document_id"],
    "additionalProperties": False,
}
CHUNK_SCHEMA = {
    "type": "object",
    "properties": {
        "document_id": _DOCUMENT,
        "chunk": {"type": "integer", "minimum": 0},
        "start": {"type": "integer", "minimum": 0},
        "end": {"type": "integer", "minimum": 0},
        "work_seconds": _WORK,
    },
    "required": ["document_id", "chunk", "start", "end"],
    "additionalProperties": False,
}
SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"document_id": _DOCUMENT, "work_seconds": _WORK},
    "required": ["document_id"],
    "additionalProperties": False,
}


def words_of(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _revision(ctx: JobContext, document_id: int) -> DocumentRevision:
    """The pinned revision (the job's input version) of a document of the job's tenant."""
    document = ctx.get_for_tenant(Document, document_id)
    revision = document.revisions.filter(version=ctx.input_version).first()
    if revision is None:
        raise PermanentError(f"document revision v{ctx.input_version} does not exist")
    return revision


def _work(ctx: JobContext, input: dict[str, Any]) -> None:
    if input.get("work_seconds"):
        time.sleep(float(input["work_seconds"]))
        ctx.heartbeat()


@handler(
    "document.ingest",
    input_schema=INGEST_SCHEMA,
    authorize_submit=document_index_authorize_submit,
    **_POLICY,
)
def document_ingest(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Split the revision into spans of `chunk_words` words; one index job per span and a
    summary after all of them, written with this job's success."""
    revision = _revision(ctx, input["document_id"])
    count, size = len(words_of(revision.text)), int(input.get("chunk_words", CHUNK_WORDS))
    _work(ctx, input)
    common = {"document_id": revision.document_id}
    if "work_seconds" in input:
        common["work_seconds"] = input["work_seconds"]
    chunks = [
        ctx.submit(
            "document.index_chunk",
            {**common, "chunk": i, "start": start, "end": min(start + size, count)},
            input_version=ctx.input_version,
        )
        for i, start in enumerate(range(0, max(count, 1), size))
    ]
    summary = ctx.submit(
        "document.summarize", common, input_version=ctx.input_version, after=chunks
    )
    return {"chunks": len(chunks), "summary": str(summary)}


@handler(
    "document.index_chunk",
    input_schema=CHUNK_SCHEMA,
    authorize_submit=document_index_authorize_submit,
    **_POLICY,
)
def document_index_chunk(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """The top terms of one span of words: a DocumentChunkIndex row, and the job's result."""
    revision = _revision(ctx, input["document_id"])
    span = words_of(revision.text)[input["start"] : input["end"]]
    terms = dict(Counter(span).most_common(TOP_TERMS))
    _work(ctx, input)
    row = {
        "document_id": revision.document_id,
        "version": revision.version,
        "chunk": input["chunk"],
        "terms": terms,
        "job_id": ctx.job_id,
    }
    ctx.local_effect("chunk_index", lambda _key: DocumentChunkIndex.objects.create(**row).pk)
    return {"chunk": input["chunk"], "terms": terms}


@handler(
    "document.summarize",
    input_schema=SUMMARY_SCHEMA,
    authorize_submit=document_index_authorize_submit,
    **_POLICY,
)
def document_summarize(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Once every chunk job ended: their terms merged (the succeeded ones) into one row."""
    revision = _revision(ctx, input["document_id"])
    outcomes = ctx.dependencies()
    indexed = [d for d in outcomes if d.state == "succeeded" and isinstance(d.result, dict)]
    merged: Counter[str] = Counter()
    for dependency in indexed:
        merged.update(dependency.result["terms"] if dependency.result else {})
    top = dict(merged.most_common(TOP_TERMS))
    _work(ctx, input)
    row = {
        "document_id": revision.document_id,
        "version": revision.version,
        "chunks": len(outcomes),
        "indexed": len(indexed),
        "terms": top,
        "job_id": ctx.job_id,
    }
    ctx.local_effect("summary", lambda _key: DocumentSummary.objects.create(**row).pk)
    return {"chunks": len(outcomes), "indexed": len(indexed), "top": list(top)[:5]}
