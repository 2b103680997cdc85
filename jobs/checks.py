"""System checks for JOBS_* settings (`manage.py check`, every start-up)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error

from outbox.checks import settings_errors

from .conf import jobs_settings


def jobs_checks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors = settings_errors(jobs_settings, "jobs.E001")
    if errors:
        return errors
    if jobs_settings.TASK_SOFT_TIME_LIMIT >= jobs_settings.TASK_TIME_LIMIT:
        errors.append(
            Error(
                f"JOBS_TASK_SOFT_TIME_LIMIT ({jobs_settings.TASK_SOFT_TIME_LIMIT:g}s) must be "
                f"below JOBS_TASK_TIME_LIMIT ({jobs_settings.TASK_TIME_LIMIT:g}s).",
                id="jobs.E002",
            )
        )
    return errors
