"""How the library joins the project's Celery app; connected once by `JobsConfig.ready`.

Nothing here touches the project's other tasks: the connection tweaks apply to `jobs.execute`
and `jobs.execute_many` only, and the start-up refusal to workers that consume a jobs queue.
Every worker of the project drops its event-loop timer's cancelled entries (jobs.worker_timers).
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace
from typing import Any

from celery.signals import task_postrun, task_prerun, worker_init, worker_ready, worker_shutdown

from .conf import jobs_settings

logger = logging.getLogger(__name__)

# Django's health check costs a `SELECT 1` round trip per job. A connection the previous job
# used less than this long ago skips it: if the database restarted inside that window, the
# claim fails on the broken connection and jobs.runtime retries it once on a fresh one
# (tests/integration/test_claim_reconnect.py).
HEALTH_CHECK_AFTER_IDLE_SECONDS = 1.0
_last_job_end = {"at": float("-inf")}


def _is_job_task(sender: Any) -> bool:
    return getattr(sender, "name", None) in ("jobs.execute", "jobs.execute_many")


def before_job(sender: Any = None, **kwargs: Any) -> None:
    if not _is_job_task(sender):
        return
    from django.db import close_old_connections, connection

    close_old_connections()
    if time.monotonic() - _last_job_end["at"] < HEALTH_CHECK_AFTER_IDLE_SECONDS:
        connection.health_check_done = True  # type: ignore[attr-defined]


def after_job(sender: Any = None, **kwargs: Any) -> None:
    if not _is_job_task(sender):
        return
    from django.db import close_old_connections

    close_old_connections()
    _last_job_end["at"] = time.monotonic()


def refuse_unsafe_worker(sender: Any = None, **kwargs: Any) -> None:
    """worker_init: a worker of a jobs queue exits (78) when redelivery could race a job."""
    from .worker_checks import (
        UnsafeWorkerSettings,
        check_worker_settings,
        worker_delivery,
        worker_prefetch_lowered,
    )

    delivery = worker_delivery(sender)
    if delivery is None:
        return
    if worker_prefetch_lowered(sender):
        delivery = replace(delivery, prefetch_multiplier=1)
        logger.info("durable-jobs: prefetch multiplier 1 on this worker (it consumes jobs)")
    try:
        check_worker_settings(delivery)
    except UnsafeWorkerSettings as exc:
        # Celery logs and swallows exceptions from signal handlers; SystemExit gets through.
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(78) from exc


def worker_seen_start(sender: Any = None, **kwargs: Any) -> None:
    from .gate import gate
    from .ops.workers import on_worker_ready
    from .worker_timers import timer_keep_compact

    gate().consumer = sender  # worker_ready's sender is the consumer
    on_worker_ready(sender)
    timer_keep_compact(sender)


def worker_seen_stop(sender: Any = None, **kwargs: Any) -> None:
    from .gate import gate
    from .ops.workers import on_worker_shutdown

    gate().stop()
    on_worker_shutdown(sender)


def connect() -> None:
    """Connect the hooks (idempotent: each has a dispatch uid)."""
    for signal, receiver in (
        (task_prerun, before_job),
        (task_postrun, after_job),
        (worker_init, refuse_unsafe_worker),
        (worker_ready, worker_seen_start),
        (worker_shutdown, worker_seen_stop),
    ):
        signal.connect(receiver, weak=False, dispatch_uid=f"jobs.{receiver.__name__}")


def jobs_schedule() -> dict[str, dict[str, Any]]:
    """The reaper, the redelivery check, the reconciler, the schedules' ticker and the
    pruner, for the project's beat."""
    reap, reconcile = jobs_settings.REAP_INTERVAL, jobs_settings.RECONCILE_INTERVAL
    redeliver = jobs_settings.REDELIVER_INTERVAL
    ticker = jobs_settings.SCHEDULE_INTERVAL
    prune = jobs_settings.PRUNE_INTERVAL
    return {
        "jobs-prune": {
            "task": "jobs.maintenance.prune",
            "schedule": prune,
            "options": {"expires": max(prune * 2, 10)},
        },
        "jobs-schedules": {
            "task": "jobs.maintenance.schedules",
            "schedule": ticker,
            # A run that waited this long is superseded: the next one decides the same ticks.
            "options": {"expires": max(ticker * 5, 10)},
        },
        "jobs-reap": {
            "task": "jobs.maintenance.reap",
            "schedule": reap,
            "options": {"expires": max(reap * 5, 10)},
        },
        "jobs-redeliver": {
            "task": "jobs.maintenance.redeliver",
            "schedule": redeliver,
            # A run that waited longer than this is superseded by the next one.
            "options": {"expires": max(redeliver * 5, 10)},
        },
        "jobs-reconcile": {
            "task": "jobs.maintenance.reconcile",
            "schedule": reconcile,
            "options": {"expires": max(reconcile * 2, 10)},
        },
    }
