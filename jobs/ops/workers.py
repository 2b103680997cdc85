"""Worker sightings for /ops/ (the worker's name: jobs.identity).

Sightings for /ops/: a small daemon thread in the worker's main process (started on
`worker_ready`, stopped on `worker_shutdown`) upserts the worker's WorkerHeartbeat row every
JOBS_WORKER_HEARTBEAT_INTERVAL seconds on its own database connection. Pool children never
write: one row per worker, not per process.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime
from typing import Any

from django.db import close_old_connections, connection
from django.utils import timezone

from jobs.models import WorkerHeartbeat

from ..conf import jobs_settings
from ..identity import worker_identity

logger = logging.getLogger(__name__)

_thread: WorkerHeartbeatThread | None = None


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


class WorkerHeartbeatThread(threading.Thread):
    def __init__(self, name: str, interval: float) -> None:
        super().__init__(name="jobs-worker-heartbeat", daemon=True)
        self.worker_name = name
        self.interval = interval
        self.started_at = timezone.now()
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while True:
                try:
                    worker_heartbeat_record(name=self.worker_name, started_at=self.started_at)
                except Exception:  # the database may be briefly away; keep the worker alive
                    logger.exception("worker heartbeat write failed")
                    close_old_connections()
                if self._stop_event.wait(self.interval):
                    return
        finally:
            connection.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)


def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    """celery.signals.worker_ready: start writing sightings for this worker."""
    global _thread
    if _thread is not None:
        return
    node = getattr(sender, "hostname", None)
    name = worker_identity(str(node) if node else f"{socket.gethostname()}:{os.getpid()}")
    _thread = WorkerHeartbeatThread(name, jobs_settings.WORKER_HEARTBEAT_INTERVAL)
    _thread.start()


def on_worker_shutdown(sender: Any = None, **kwargs: Any) -> None:
    """celery.signals.worker_shutdown: stop the thread (the row ages out of "recent")."""
    global _thread
    if _thread is not None:
        _thread.stop()
        _thread = None
