"""System checks (`manage.py check`, every start-up): misconfiguration named before any job."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error

from .conf import AppSettings, outbox_settings


def settings_errors(app_settings: AppSettings, check_id: str) -> list[CheckMessage]:
    """One error per setting of the wrong type or out of range."""
    return [
        Error(f"{name} {problem}", hint="See docs/operations.md, Settings.", id=check_id)
        for name, problem in app_settings.problems()
    ]


def outbox_checks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors = settings_errors(outbox_settings, "outbox.E001")
    if errors:
        return errors
    from .transport import broker_url, celery_app

    try:
        app = celery_app()
    except Exception as exc:
        return [
            Error(
                f"OUTBOX_CELERY_APP={outbox_settings.CELERY_APP!r} cannot be loaded: {exc}",
                id="outbox.E003",
            )
        ]
    if not broker_url(app):
        errors.append(
            Error(
                f"The Celery app {app.main!r} has no broker URL: jobs would be published to "
                "Celery's default broker, where no worker of yours listens.",
                hint="Set CELERY_BROKER_URL (your celery.py reads Django settings with "
                "namespace='CELERY'), or name your app in OUTBOX_CELERY_APP.",
                id="outbox.E002",
            )
        )
    if outbox_settings.MARK_INTERVAL * 4 > outbox_settings.RESERVATION_SECONDS:
        errors.append(
            Error(
                f"OUTBOX_MARK_INTERVAL ({outbox_settings.MARK_INTERVAL:g}s) must stay far below "
                f"OUTBOX_RESERVATION_SECONDS ({outbox_settings.RESERVATION_SECONDS:g}s): "
                "at most a quarter of it.",
                id="outbox.E004",
            )
        )
    if outbox_settings.LINGER_SECONDS * 10 > outbox_settings.RESERVATION_SECONDS:
        errors.append(
            Error(
                f"OUTBOX_LINGER_SECONDS ({outbox_settings.LINGER_SECONDS:g}s) must stay far "
                f"below OUTBOX_RESERVATION_SECONDS ({outbox_settings.RESERVATION_SECONDS:g}s): "
                "at most a tenth of it, or lingering rows are published twice.",
                id="outbox.E005",
            )
        )
    return errors
