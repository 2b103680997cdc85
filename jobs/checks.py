"""System checks for JOBS_* settings (`manage.py check`, every start-up)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning

from outbox.checks import settings_errors

from . import registry
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


def jobs_kind_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A kind the HTTP API can never accept is worth knowing about before a client tries."""
    return [
        Warning(
            f"The kind {kind!r} cannot be submitted over HTTP: a kind is dot-separated parts of "
            f"letters, digits, '_' and '-', at most {registry.KIND_MAX_LENGTH} characters.",
            hint="Rename it, or submit it from Python only (jobs.submit).",
            id="jobs.W001",
        )
        for kind in registry.kinds()
        if not registry.kind_name_for_http(kind)
    ]
