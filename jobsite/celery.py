"""The Celery app: transport for job ids, configured from Django settings (CELERY_*)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from celery import Celery
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")

app = Celery("jobsite")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes every database connection around every task unless this
# old-style key is set; reconnecting per job cost ~17% of a worker's time. Connections are
# kept, and Django's own checks (CONN_MAX_AGE, health checks, broken connections) run around
# each task instead, so a database restart still leads to a fresh connection.
app.conf["CELERY_DB_REUSE_MAX"] = int(os.environ.get("JOBS_DB_REUSE_MAX", "100000"))
app.autodiscover_tasks()


# Django's health check costs a `SELECT 1` round trip per job. A connection the previous task
# used less than this long ago skips it: if the database restarted inside that window, the
# claim fails on the broken connection and jobs.runtime retries it once on a fresh one
# (tests/integration/test_claim_reconnect.py).
HEALTH_CHECK_AFTER_IDLE_SECONDS = 1.0
_last_task_end = {"at": float("-inf")}


@task_prerun.connect
def _before_task(**kwargs: Any) -> None:
    from django.db import close_old_connections, connection

    close_old_connections()
    if time.monotonic() - _last_task_end["at"] < HEALTH_CHECK_AFTER_IDLE_SECONDS:
        connection.health_check_done = True  # type: ignore[attr-defined]


@task_postrun.connect
def _after_task(**kwargs: Any) -> None:
    from django.db import close_old_connections

    close_old_connections()
    _last_task_end["at"] = time.monotonic()


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


@worker_process_shutdown.connect
def _flush_outbox_marks(**kwargs: Any) -> None:
    """A pool child exits without running atexit hooks: mark what its fast path published
    (hand-overs to the next job of a key) instead of leaving the relay to publish it again."""
    from outbox import marks

    marks.flush()
