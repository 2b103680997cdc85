from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks


class OutboxConfig(AppConfig):
    name = "outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from celery.signals import worker_process_shutdown

        from . import tasks  # noqa: F401  (registered whether or not tasks are autodiscovered)
        from .checks import outbox_checks
        from .schedule import maintenance_schedule_add, outbox_schedule

        checks.register(outbox_checks, "outbox")
        maintenance_schedule_add(outbox_schedule())
        worker_process_shutdown.connect(_flush_marks, weak=False, dispatch_uid="outbox.flush_marks")


def _flush_marks(**kwargs: Any) -> None:
    """A pool child exits without running atexit hooks: mark what its fast path published
    instead of leaving the relay to publish it again."""
    from . import marks

    marks.flush()
