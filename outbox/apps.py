from __future__ import annotations

import logging
from typing import Any

from django.apps import AppConfig
from django.core import checks

logger = logging.getLogger(__name__)


class OutboxConfig(AppConfig):
    name = "outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import worker_init, worker_process_shutdown

        from . import tasks  # noqa: F401  (registered whether or not tasks are autodiscovered)
        from .checks import outbox_checks
        from .schedule import maintenance_schedule_add, outbox_schedule

        checks.register(outbox_checks, "outbox")
        maintenance_schedule_add(outbox_schedule())
        worker_process_shutdown.connect(_flush_marks, weak=False, dispatch_uid="outbox.flush_marks")
        worker_init.connect(_worker_transport, weak=False, dispatch_uid="outbox.worker_transport")


def _worker_transport(sender: Any = None, **kwargs: Any) -> None:
    """A worker over plain redis:// survives a Redis restart (outbox/kombu_redis.py), and
    every worker reconnects within seconds of its broker's return (outbox/reconnect.py)."""
    from .reconnect import worker_reconnects_promptly
    from .transport import worker_transport

    if sender is None:
        return
    worker_reconnects_promptly(sender.app)
    if worker_transport(sender.app):
        logger.info("durable-jobs: this worker uses outbox.kombu_redis.Transport over Redis")


def _flush_marks(**kwargs: Any) -> None:
    """A pool child exits without running atexit hooks: mark what its fast path published
    instead of leaving the relay to publish it again."""
    from . import marks

    marks.flush()
