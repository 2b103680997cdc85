"""OpenTelemetry for the outbox: whether tracing is on, and the relay's publish span.

A message that carries a W3C trace context in its kwargs (`traceparent`, `tracestate`: the
jobs app puts its job's there) is published under a span `outbox.publish` in that trace. A
batch message (`{"items": [...]}`) gets a span of its own whose links name each item's
trace, and its kwargs carry that span's context to the consumer. Nothing else of a message
goes into a span.

Zero cost when no SDK is configured: `enabled()` asks once whether the tracer provider (the
global one, or the one given to `use`) is the API's no-op one (configure the SDK before a
process's first message; a forked child and `refresh()` ask again), and `publish_traced` then
returns a null context.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

W3C_KEYS = ("traceparent", "tracestate")
TRACER_NAME = "durable_jobs"

_W3C = TraceContextTextMapPropagator()
_enabled: bool | None = None
_provider: trace.TracerProvider | None = None  # None: the global one
_tracer: trace.Tracer | None = None


def enabled() -> bool:
    """Whether an SDK is configured (asked once per process; `refresh()` asks again)."""
    global _enabled, _tracer
    if _enabled is None:
        provider = _provider or trace.get_tracer_provider()
        _enabled = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        _tracer = provider.get_tracer(TRACER_NAME) if _enabled else None
    return _enabled


def refresh() -> None:
    """Ask again whether an SDK is configured (after configuring one late)."""
    global _enabled
    _enabled = None


# A forked child (a prefork pool process) asks again: it configures its SDK after the fork
# (`worker_process_init`), since an exporter's thread does not survive one.
os.register_at_fork(after_in_child=refresh)


def use(provider: trace.TracerProvider | None) -> None:
    """Trace with `provider` instead of the global one; None: the global one again."""
    global _provider
    _provider = provider
    refresh()


def tracer() -> trace.Tracer:
    if not enabled() or _tracer is None:
        return trace.NoOpTracer()
    return _tracer


def carrier_of(span_context: Context | None = None) -> dict[str, str]:
    """The W3C headers of a context (default: the current one); empty without a span."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=span_context)
    return carrier


def context_of(carrier: Mapping[str, Any] | None) -> Context | None:
    """The context a W3C carrier names; None when it names no valid span."""
    if not carrier or not isinstance(carrier.get("traceparent"), str):
        return None
    extracted = _W3C.extract({k: str(carrier[k]) for k in W3C_KEYS if k in carrier})
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def links_of(carriers: list[Any]) -> list[trace.Link]:
    """A span link to each carrier's span (those that name one)."""
    links = []
    for carrier in carriers:
        found = context_of(carrier) if isinstance(carrier, Mapping) else None
        if found is not None:
            links.append(trace.Link(trace.get_current_span(found).get_span_context()))
    return links


def publish_traced(
    task_name: str, kwargs: dict[str, Any]
) -> AbstractContextManager[dict[str, Any]]:
    """Around one broker publish: the kwargs to send (a batch message's carry its span)."""
    if not enabled():
        return contextlib.nullcontext(kwargs)
    return _publish_span(task_name, kwargs)


@contextlib.contextmanager
def _publish_span(task_name: str, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
    items = kwargs.get("items")
    attributes: dict[str, str | int] = {
        "messaging.operation.type": "send",
        "outbox.task_name": task_name,
    }
    kind = trace.SpanKind.PRODUCER
    if isinstance(items, list):
        links = links_of(items)
        if not links:
            yield kwargs
            return
        attributes["outbox.items"] = len(items)
        with tracer().start_as_current_span(
            "outbox.publish", kind=kind, links=links, attributes=attributes
        ):
            yield {**kwargs, **carrier_of()}
        return
    parent = context_of(kwargs)
    if parent is None:
        yield kwargs
        return
    with tracer().start_as_current_span(
        "outbox.publish", context=parent, kind=kind, attributes=attributes
    ):
        yield kwargs
