"""Worker sightings for /ops/ (the worker's name: jobs.identity).

Sightings for /ops/: a small daemon thread in the worker's main process (started on
`worker_ready`, stopped on `worker_shutdown`) upserts the worker's WorkerHeartbeat row every
JOBS_WORKER_HEARTBEAT_INTERVAL seconds on its own database connection. Pool children never
write: one row per worker, not per process.

Liveness: a worker that stops cleanly removes its row, so it is gone at once; one that died
(SIGKILL, a lost host) stops writing and counts as gone LIVE_INTERVALS heartbeat intervals
after its last write (`workers_live`).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime, timedelta
from typing import Any

from django.db import close_old_connections, connection
from django.db.models import QuerySet
from django.utils import timezone

from jobs.conf import jobs_settings
from jobs.identity import worker_identity
from jobs.models import WorkerHeartbeat
from outbox.background import Background, PerProcess

logger = logging.getLogger(__name__)

# A live worker's row is at most one interval old, plus its write's own time; older than two
# intervals, the worker missed a write and then some: it is gone (or cannot reach the
# database, which for its jobs is the same).
LIVE_INTERVALS = 2


def workers_live(*, interval: float | None = None) -> QuerySet[WorkerHeartbeat]:
    """Workers that wrote their row within LIVE_INTERVALS heartbeat intervals."""
    every = jobs_settings.WORKER_HEARTBEAT_INTERVAL if interval is None else interval
    cutoff = timezone.now() - timedelta(seconds=LIVE_INTERVALS * every)
    return WorkerHeartbeat.objects.filter(seen_at__gte=cutoff).order_by("name")


def worker_heartbeat_record(*, name: str, started_at: datetime) -> None:
    """Upsert this worker's row with the current time."""
    WorkerHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": started_at,
            "seen_at": timezone.now(),
        },
    )


class _Sightings(Background):
    """The worker's sightings: its row upserted every `interval` seconds until stopped."""

    thread_name = "jobs-worker-heartbeat"

    def __init__(self) -> None:
        super().__init__()
        self.worker_name: str | None = None  # set from start() to the end of stop()
        self.interval = 0.0
        self.started_at = timezone.now()

    def start(self, name: str, interval: float) -> bool:
        """Start writing sightings as `name`; False when they are written already."""
        with self.cond:
            if self.worker_name is not None:
                return False
            self.worker_name, self.interval, self.started_at = name, interval, timezone.now()
            self.ensure_thread()
            return True

    def run(self) -> None:
        assert self.worker_name is not None
        while True:
            try:
                worker_heartbeat_record(name=self.worker_name, started_at=self.started_at)
            except Exception:  # the database may be briefly away; keep the worker alive
                logger.exception("worker heartbeat write failed")
                close_old_connections()
            with self.cond:
                if self.cond.wait_for(lambda: self.stopping, self.interval):
                    return


# The worker's main process writes them; a forked pool child starts with none.
_sightings = PerProcess(_Sightings)


def worker_heartbeat_forget(*, name: str) -> None:
    """Remove this process's row: a worker that stopped is not seen any more. Another live
    process under the same name (another host) keeps its row."""
    WorkerHeartbeat.objects.filter(
        name=name, hostname=socket.gethostname(), pid=os.getpid()
    ).delete()


def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    """celery.signals.worker_ready: start writing sightings for this worker."""
    node = getattr(sender, "hostname", None)
    name = worker_identity(str(node) if node else f"{socket.gethostname()}:{os.getpid()}")
    _sightings().start(name, jobs_settings.WORKER_HEARTBEAT_INTERVAL)


def on_worker_shutdown(sender: Any = None, **kwargs: Any) -> None:
    """celery.signals.worker_shutdown: stop the thread, then remove the worker's row."""
    sightings = _sightings.current()
    name = sightings.worker_name if sightings is not None else None
    if sightings is None or name is None:
        return
    sightings.stop()  # joined first: no write of its own can bring the row back
    sightings.worker_name = None
    try:
        worker_heartbeat_forget(name=name)
    except Exception:  # the database may be away: the row then ages out of workers_live
        logger.exception("worker heartbeat removal failed")
    finally:
        connection.close()
