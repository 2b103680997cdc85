"""Test-only kinds for the operators' screens and the job log lines.

Workers load this module through env JOBS_HANDLER_MODULES=tests.kinds_operators; the test
process imports it so `jobs.submit` knows the kinds.
"""

from __future__ import annotations

import logging
from typing import Any

from jobs.context import JobContext
from jobs.exceptions import PermanentError, TransientError
from jobs.registry import handler

logger = logging.getLogger("tests.kinds_operators")

DOCUMENT_SCHEMA = {
    "type": "object",
    "properties": {"document_id": {"type": "integer", "minimum": 0}},
    "required": ["document_id"],
    "additionalProperties": False,
}


@handler("test.ops.document", input_schema=DOCUMENT_SCHEMA, responsible="ingest-team")
def ops_document(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Document 0 never exists upstream: a permanent failure with the handler's own words."""
    if input["document_id"] == 0:
        raise PermanentError("the upstream archive has no such document")
    return {"document_id": input["document_id"]}


@handler("test.ops.chatty")
def ops_chatty(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Logs a line of its own, with no `extra`: the job's fields come from the context."""
    logger.info("handler at work")
    return {}


@handler("test.ops.flaky", max_attempts=4, base_delay=0.1, max_delay=0.2)
def ops_flaky(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Fails transiently on its first attempt: a retry through the outbox, then success."""
    if ctx.attempt == 1:
        raise TransientError("provider busy, try again")
    return {"attempt": ctx.attempt}
