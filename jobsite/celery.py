"""The Celery app: transport for job ids, configured from Django settings (CELERY_*)."""

from __future__ import annotations

import os
import sys
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")

app = Celery("jobsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _refuse_unsafe_settings(sender: Any = None, **kwargs: Any) -> None:
    from jobs.worker_checks import UnsafeWorkerSettings, check_worker_settings

    try:
        check_worker_settings(app.conf)
    except UnsafeWorkerSettings as exc:
        # Celery logs and swallows exceptions from signal handlers; SystemExit gets through.
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(78) from exc


@worker_ready.connect
def _worker_heartbeat_start(sender: Any = None, **kwargs: Any) -> None:
    from jobs.ops.workers import on_worker_ready

    on_worker_ready(sender)


@worker_shutdown.connect
def _worker_heartbeat_stop(sender: Any = None, **kwargs: Any) -> None:
    from jobs.ops.workers import on_worker_shutdown

    on_worker_shutdown(sender)
