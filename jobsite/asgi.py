"""ASGI entry point: the web server (`gunicorn -c python:jobsite.gunicorn jobsite.asgi`).

Under ASGI a `GET /api/jobs/<id>/?wait=` long-poll sleeps as a coroutine between its reads
(jobs.api.long_poll), so waiting clients do not take the places of other requests.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from jobsite.checks import require_static_manifest
from jobsite.tracing import configure_tracing, instrument_django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
# Persistent connections leak under ASGI (each request runs its sync code in a thread of its
# own), so the web server takes its connections from a pool; a long-poll gives its
# connection back between reads. DATABASE_POOL_SIZE=N changes the size per process.
os.environ.setdefault("DATABASE_POOL_SIZE", "10")
if configure_tracing("durable-jobs-web"):  # OTEL_EXPORTER_OTLP_ENDPOINT (jobsite/tracing.py)
    instrument_django()
application = get_asgi_application()
if settings.PRODUCTION:
    # Every page that links a stylesheet would answer 500 (jobsite/checks.py): refuse.
    require_static_manifest()
