"""Proposal under test: the durable worker keeping its database connection between tasks.

Celery's Django fixup closes every connection before and after each task unless
CELERY_DB_REUSE_MAX is set, so each job pays a new connection (TCP, auth, SET TIME ZONE).
This app is jobsite's with reuse on and Django's own stale-connection check per task
(close_old_connections: CONN_MAX_AGE, health checks, broken connections) instead.
Benchmarks only; see docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Any

from celery.signals import task_postrun, task_prerun

from jobsite.celery import app

# The fixup reads the old-style key (CELERY_DB_REUSE_MAX in Django settings does the same).
app.conf["CELERY_DB_REUSE_MAX"] = 1_000_000


@task_prerun.connect
@task_postrun.connect
def _close_stale_connections(**kwargs: Any) -> None:
    from django.db import close_old_connections

    close_old_connections()


__all__ = ["app"]
