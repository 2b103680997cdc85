"""Test-only: the tracing tests' kinds, and spans of a worker or relay process in a file.

Workers and relays load this module through env JOBS_HANDLER_MODULES=tests.tracing_export;
with env JOBS_TEST_SPANS_FILE set, importing it configures the OpenTelemetry SDK as the
process's global tracer provider, with a synchronous exporter that appends one JSON line per
finished span to that file (O_APPEND: whole lines from every process, prefork children too).
The test process imports it for the kinds and reads the file with `read_spans`; its own spans
go to an in-memory exporter, turned into the same records by `span_record`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from jobs.context import JobContext
from jobs.exceptions import TransientError
from jobs.registry import handler

SPANS_FILE_ENV = "JOBS_TEST_SPANS_FILE"
_POLICY: dict[str, Any] = {"max_attempts": 5, "max_elapsed": 600, "base_delay": 0.05}


def _echo(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Fails (transient) while the attempt is at most `fail_times`; else echoes `n`."""
    if ctx.attempt <= int(input.get("fail_times", 0)):
        raise TransientError(f"dependency down on attempt {ctx.attempt} (test)")
    return {"n": input.get("n"), "attempt": ctx.attempt}


# One message per job (never packed), and the batch path's kind (packed under company).
handler("trace.alone", lease_seconds=30, batch=False, **_POLICY)(_echo)
handler("trace.batch", lease_seconds=30, **_POLICY)(_echo)


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What a test asserts about a span: its name, ids, parent, attributes and links."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "links": [
            [f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}"] for link in span.links
        ],
        "pid": os.getpid(),
    }


class FileSpanExporter(SpanExporter):
    """Appends each finished span to a file, one JSON line (`span_record`) per span."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(span)) + "\n" for span in spans)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def read_spans(path: str | Path) -> list[dict[str, Any]]:
    """Every span the processes wrote to `path` so far."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _configure_from_env() -> None:
    path = os.environ.get(SPANS_FILE_ENV)
    if not path:
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    trace.set_tracer_provider(provider)


_configure_from_env()
