"""The example project's Celery app, as any Django project writes it (Celery's own docs).

durable-jobs needs nothing more: it publishes through this app (the current one), connects
its worker hooks and start-up checks itself, and adds its maintenance tasks to beat.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_init

from jobsite.envsettings import env_number
from jobsite.tracing import configure_tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")

app = Celery("jobsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes every database connection around every task unless this
# old-style key is set; reconnecting per job cost ~17% of a worker's time. Connections are
# kept, and Django's own checks (CONN_MAX_AGE, health checks, broken connections) run around
# each job instead (jobs.celery_hooks), so a database restart still leads to a fresh one.
app.conf["CELERY_DB_REUSE_MAX"] = env_number(os.environ, "JOBS_DB_REUSE_MAX", 100000)
app.autodiscover_tasks()


@worker_process_init.connect
def _tracing_in_pool_process(**_: object) -> None:
    """OTLP traces from each pool process when configured (jobsite/tracing.py)."""
    configure_tracing("durable-jobs-worker")
