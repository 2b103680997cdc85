"""What jobs.tracing's hooks cost per job, without an SDK and with one (docs/benchmarks.md).

    .venv/bin/python -m bench.tracing_overhead

No database, no broker: each hook a job passes through (root span and carrier at submit, the
message hints, the delivery's context, the claim, run and complete spans) is timed with
`timeit` on stand-in objects, first with no SDK configured (the API's no-op provider: every
hook returns at once), then with the SDK and an exporter that drops spans (the cost of making
them, not of shipping them).
"""

from __future__ import annotations

import os
import timeit
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
django.setup()

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from jobs import tracing  # noqa: E402

N = 20_000


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@dataclass
class _Job:  # what the hooks read of a Job
    pk: uuid.UUID
    kind: str
    trace_context: Any = None


@dataclass
class _Lease:  # what the hooks read of a Lease
    job_id: uuid.UUID
    kind: str = "bench.noop"
    attempt: int = 1
    generation: int = 1


def one_job() -> None:
    """Every hook one job of the single-message path passes through."""
    job = _Job(uuid.uuid4(), "bench.noop")
    tracing.job_trace_begin(job)  # type: ignore[arg-type]
    hints = tracing.message_hints({"job_id": str(job.pk)}, job)  # type: ignore[arg-type]
    hints.setdefault("traceparent", None)  # no stored lookup: a hint (or none) is in hand
    lease = _Lease(job.pk)
    with tracing.job_delivery(job.pk, hints if hints["traceparent"] else {}):
        tracing.traced("jobs.claim", lambda: None, job_id=job.pk)
        tracing.traced(
            "jobs.run",
            lambda: tracing.traced("jobs.complete", lambda: None, lease=lease),  # type: ignore[arg-type]
            lease=lease,  # type: ignore[arg-type]
        )


def bare() -> None:
    """The same stand-ins and closures, no hook: subtracted from `one_job`."""
    job = _Job(uuid.uuid4(), "bench.noop")
    hints = {"job_id": str(job.pk)}
    hints.setdefault("traceparent", None)
    lease = _Lease(job.pk)
    for call in (lambda: None, lambda: None, lambda: lease):
        call()


def _per_job_us(fn: Any) -> float:
    best = min(timeit.repeat(fn, number=N, repeat=5))
    return best / N * 1e6


def main() -> None:
    tracing.use(None)
    assert not tracing.enabled()
    baseline = _per_job_us(bare)
    off = _per_job_us(one_job)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_Drop()))
    tracing.use(provider)
    assert tracing.enabled()
    on = _per_job_us(one_job)
    print(f"per job, the hooks of one delivery ({N} jobs, best of 5):")
    print(f"  no SDK configured:  {off - baseline:7.2f} us  (hooks return at once)")
    print(f"  SDK, spans dropped: {on - baseline:7.2f} us  (5 spans made)")


if __name__ == "__main__":
    main()
