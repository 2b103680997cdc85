"""OpenTelemetry spans of a job's life: one trace per job, whatever process or attempt.

- `jobs.submit`: the job's root span, a child of the caller's current span (the Django
  request's, with opentelemetry-instrumentation-django). Its W3C context is stored with the
  job (`Job.trace_context`) and each of the job's messages carries it as hints
  (`traceparent`, `tracestate`): the relay's `outbox.publish` (outbox.tracing) is its child.
- A delivery (`job_delivery`) takes the job's root context from the message, else from the
  row; `jobs.claim`, `jobs.run` (the handler and the outcome) and, inside it, `jobs.complete`
  (the outcome's commit: success, retry, quarantine) are children of the root. A retry's
  message carries the same context, so every attempt, redelivery and redrive joins the trace.
- A batch message: `jobs.execute_many` (a child of its publish span) links to each job's
  trace; each job's run is a `jobs.run` span in its own trace, linked to the batch.
Attributes: job id, kind, attempt, generation, outcome; never the input.

Zero cost when no SDK is configured: every hook asks `enabled()` (once per process, then a
global read) and returns at once; no span, carrier or column is made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue

from outbox.tracing import (
    W3C_KEYS,
    carrier_of,
    context_of,
    enabled,
    refresh,
    tracer,
    use,
)

if TYPE_CHECKING:
    from .claims import Claim
    from .leases import Lease
    from .models import Job

Attributes = dict[str, AttributeValue]


@dataclass(frozen=True)
class _Root:
    """A job's root span: its W3C carrier, and the same extracted once."""

    carrier: dict[str, str]
    context: Context
    span: trace.SpanContext


def _root_of(carrier: dict[str, str] | None) -> _Root | None:
    context = context_of(carrier)
    if carrier is None or context is None:
        return None
    return _Root(carrier, context, trace.get_current_span(context).get_span_context())


# The root of each job this process is delivering: the parent of its spans, and the context
# of the messages its outcome sends (a Lease has none).
_delivering: dict[UUID, _Root] = {}
_NULL: AbstractContextManager[None] = contextlib.nullcontext()

__all__ = ["enabled", "refresh", "use"]


def _uuid(job_id: UUID | str) -> UUID:
    return job_id if isinstance(job_id, UUID) else UUID(str(job_id))


# -- submission ----------------------------------------------------------------------------


def _root_span(job_id: UUID, kind: str) -> dict[str, str]:
    """Start and end a job's root span under the current context; its W3C carrier."""
    with tracer().start_as_current_span(
        "jobs.submit",
        kind=trace.SpanKind.PRODUCER,
        attributes={"job.id": str(job_id), "job.kind": kind},
    ):
        return carrier_of()


def job_trace_begin(job: Job) -> None:
    """A new job's root span (a child of the caller's span); its context goes on the row."""
    if enabled():
        job.trace_context = _root_span(job.pk, job.kind)


def jobs_trace_begin(columns: dict[str, list[Any]]) -> None:
    """The root spans of a bulk submit's jobs: a `trace_context` column beside `id`, `kind`."""
    if enabled():
        columns["trace_context"] = [
            _root_span(job_id, kind)
            for job_id, kind in zip(columns["id"], columns["kind"], strict=True)
        ]


def message_hints(kwargs: dict[str, Any], job: Job | Lease | UUID | None) -> dict[str, Any]:
    """A message's kwargs plus the job's trace context (from the row, or the delivery that
    sends it); unchanged when tracing is off or the job has none."""
    if not enabled() or job is None:
        return kwargs
    job_id = job if isinstance(job, UUID) else getattr(job, "job_id", None)
    stored = vars(job).get("trace_context")  # a deferred field stays unread: no query
    root = _delivering.get(job_id) if job_id is not None else None
    carrier = root.carrier if root is not None else stored
    return {**kwargs, **carrier} if carrier else kwargs


def bulk_message_hints(kwargs: list[dict[str, Any]], columns: dict[str, list[Any]]) -> None:
    """A bulk submit's messages get their jobs' trace contexts (`jobs_trace_begin`)."""
    carriers = columns.get("trace_context")
    if carriers is not None:
        for hints, carrier in zip(kwargs, carriers, strict=True):
            hints.update(carrier)


# -- delivery ------------------------------------------------------------------------------


def _stored_carriers(job_ids: Sequence[UUID]) -> dict[UUID, dict[str, str]]:
    from .models import Job

    rows = Job.objects.filter(pk__in=job_ids, trace_context__isnull=False)
    return {pk: carrier for pk, carrier in rows.values_list("pk", "trace_context") if carrier}


def _carrier(hints: Mapping[str, Any] | None) -> dict[str, str] | None:
    if hints and isinstance(hints.get("traceparent"), str):
        return {k: str(hints[k]) for k in W3C_KEYS if k in hints}
    return None


def job_delivery(
    job_id: UUID | str, hints: Mapping[str, Any] | None
) -> AbstractContextManager[None]:
    """Around one job's delivery: its spans join the job's trace (module docstring)."""
    if not enabled():
        return _NULL
    return _delivery(_uuid(job_id), hints)


@contextlib.contextmanager
def _delivery(job_id: UUID, hints: Mapping[str, Any] | None) -> Iterator[None]:
    root = _root_of(_carrier(hints) or _stored_carriers([job_id]).get(job_id))
    if root is None:
        # A job accepted while tracing was off: this delivery is a trace of its own.
        with tracer().start_as_current_span(
            "jobs.deliver", kind=trace.SpanKind.CONSUMER, attributes={"job.id": str(job_id)}
        ):
            yield
        return
    token = otel_context.attach(root.context)
    _delivering[job_id] = root
    try:
        yield
    finally:
        _delivering.pop(job_id, None)
        otel_context.detach(token)


def batch_delivery(
    items: list[dict[str, Any]], hints: Mapping[str, Any] | None
) -> AbstractContextManager[None]:
    """Around a batch message: `jobs.execute_many`, linked to each job's trace."""
    if not enabled():
        return _NULL
    return _batch(items, hints)


def _item_job_id(item: Any) -> UUID | None:
    try:
        return _uuid(item["job_id"])
    except (KeyError, TypeError, ValueError):
        return None  # jobs.batch logs and skips it


@contextlib.contextmanager
def _batch(items: list[dict[str, Any]], hints: Mapping[str, Any] | None) -> Iterator[None]:
    carriers: dict[UUID, dict[str, str]] = {}
    missing: list[UUID] = []
    for item in items:
        job_id = _item_job_id(item)
        carrier = _carrier(item)
        if job_id is not None and carrier is not None:
            carriers[job_id] = carrier
        elif job_id is not None:
            missing.append(job_id)
    if missing:
        carriers.update(_stored_carriers(missing))
    roots = {job_id: root for job_id, c in carriers.items() if (root := _root_of(c))}
    with tracer().start_as_current_span(
        "jobs.execute_many",
        context=context_of(_carrier(hints)),
        kind=trace.SpanKind.CONSUMER,
        links=[trace.Link(root.span) for root in roots.values()],
        attributes={"jobs.batch.size": len(items)},
    ):
        _delivering.update(roots)
        try:
            yield
        finally:
            for job_id in roots:
                _delivering.pop(job_id, None)


# -- spans of a delivery -------------------------------------------------------------------


def lease_attributes(lease: Lease) -> Attributes:
    return {
        "job.id": str(lease.job_id),
        "job.kind": lease.kind,
        "job.attempt": lease.attempt,
        "job.generation": lease.generation,
    }


def claim_attributes(claim: Claim) -> Attributes:
    """What a claim answered: its status, and the attempt and generation it took."""
    attributes: Attributes = {"job.id": str(claim.job_id), "jobs.claim.status": claim.status.value}
    if claim.kind:
        attributes["job.kind"] = claim.kind
    if claim.lease is not None:
        attributes.update(lease_attributes(claim.lease))
    return attributes


def outcome_attributes(outcome: Any) -> Attributes:
    """An outcome (jobs.outcomes.Outcome), or a verdict that has one."""
    outcome = getattr(outcome, "outcome", outcome)
    return {"job.outcome": str(getattr(outcome, "value", outcome))}


def traced[T](
    name: str,
    call: Callable[[], T],
    *,
    job_id: UUID | str | None = None,
    lease: Lease | None = None,
    about: Callable[[T], Attributes] | None = None,
) -> T:
    """`call()` under a span `name`: a child of the job's root when this process delivers
    `job_id` (or the lease's job) and it is not the current trace, else of the current span
    (linked to it); `about` adds attributes of the result."""
    if not enabled():
        return call()
    return _traced(name, call, job_id=job_id, lease=lease, about=about)


def _parent(job_id: UUID | None) -> tuple[Context | None, list[trace.Link]]:
    root = _delivering.get(job_id) if job_id is not None else None
    if root is None:
        return None, []
    here = trace.get_current_span().get_span_context()
    if not here.is_valid or here.trace_id == root.span.trace_id:
        return None, []  # already in the job's trace: the current span is the parent
    return root.context, [trace.Link(here)]  # a batch's job: its own trace, linked to it


def _traced[T](
    name: str,
    call: Callable[[], T],
    *,
    job_id: UUID | str | None,
    lease: Lease | None,
    about: Callable[[T], Attributes] | None,
) -> T:
    key = lease.job_id if lease is not None else (_uuid(job_id) if job_id is not None else None)
    parent, links = _parent(key)
    attributes = lease_attributes(lease) if lease is not None else {}
    if key is not None:
        attributes.setdefault("job.id", str(key))
    with tracer().start_as_current_span(
        name, context=parent, links=links, attributes=attributes
    ) as span:
        result = call()
        if about is not None:
            span.set_attributes(about(result))
        return result
