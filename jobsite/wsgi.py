"""WSGI entry point."""

from __future__ import annotations

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from jobsite.checks import require_static_manifest
from jobsite.tracing import configure_tracing, instrument_django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
if configure_tracing("durable-jobs-web"):  # OTEL_EXPORTER_OTLP_ENDPOINT (jobsite/tracing.py)
    instrument_django()
application = get_wsgi_application()
if settings.PRODUCTION:
    # Every page that links a stylesheet would answer 500 (jobsite/checks.py): refuse.
    require_static_manifest()
