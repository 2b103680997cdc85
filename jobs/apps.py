from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class JobsConfig(AppConfig):
    name = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from outbox.batching import batch_rule_add
        from outbox.schedule import maintenance_schedule_add

        # The tasks (and the worker's failpoint names) exist in every process, whether or not
        # the project autodiscovers tasks.
        from . import celery_hooks, failpoints, registry, tasks  # noqa: F401
        from .checks import (
            jobs_checks,
            jobs_database_timeouts,
            jobs_kind_names,
            jobs_schedule_checks,
        )
        from .tasks_backend.backend import task_celery_queues, task_kind_load

        checks.register(jobs_checks, "jobs")
        checks.register(jobs_kind_names, "jobs")
        checks.register(jobs_database_timeouts, "jobs")
        checks.register(jobs_schedule_checks, "jobs")
        registry.lazy_kinds_add(registry.LazyKinds(load=task_kind_load, queues=task_celery_queues))
        registry.autoload()
        celery_hooks.connect()
        maintenance_schedule_add(celery_hooks.jobs_schedule())
        from .callbacks import checks as callback_checks  # noqa: F401  (registers them)
        from .callbacks.tasks import callbacks_schedule

        maintenance_schedule_add(callbacks_schedule())
        from .dispatch import EXECUTE_MANY_TASK, EXECUTE_TASK, batchable

        batch_rule_add(EXECUTE_TASK, batch_task=EXECUTE_MANY_TASK, accepts=batchable)
