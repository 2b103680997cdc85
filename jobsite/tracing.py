"""Example project: OpenTelemetry traces over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

The web entry points (asgi.py, wsgi.py) call `configure_tracing` before building the
application and then instrument Django; every Celery pool process calls it after its fork
(jobsite/celery.py), since an exporter's thread does not survive one. Needs the `[otel]` extra;
without the variable nothing is configured and jobs.tracing stays a no-op
(docs/operations.md, "Tracing (OpenTelemetry)").
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def configure_tracing(service: str) -> bool:
    """Set the global tracer provider: OTLP/HTTP export in batches. True when configured."""
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the [otel] extra is missing")
        return False
    name = os.environ.get("OTEL_SERVICE_NAME", service)
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


def instrument_django() -> None:
    """Each request a span (opentelemetry-instrumentation-django), when installed."""
    try:
        from opentelemetry.instrumentation.django import DjangoInstrumentor
    except ImportError:
        logger.warning("opentelemetry-instrumentation-django is missing: requests are not spans")
        return
    DjangoInstrumentor().instrument()
