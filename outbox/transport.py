"""The Celery app the outbox publishes through: the project's, never a default one."""

from __future__ import annotations

import os
from functools import cache

from celery import Celery, current_app
from django.utils.module_loading import import_string

from .conf import outbox_settings
from .exceptions import BrokerNotConfigured


@cache
def _app_at(path: str) -> Celery:
    app = import_string(path)
    if not isinstance(app, Celery):
        raise TypeError(
            f"OUTBOX_CELERY_APP={path!r} names a {type(app).__name__}, not a Celery app"
        )
    return app


def celery_app() -> Celery:
    """OUTBOX_CELERY_APP when set, else the current app (the one the project's celery.py made)."""
    if outbox_settings.CELERY_APP:
        return _app_at(outbox_settings.CELERY_APP)
    return current_app  # a proxy: whichever app is current when it is used


def broker_url(app: Celery) -> str:
    """The broker URL the app will use, or "" when none was configured.

    Celery falls back to amqp://guest@localhost when nothing names a broker; a message sent
    there reaches no worker of this project, so an empty answer is a refusal, not a default.
    """
    return str(os.environ.get("CELERY_BROKER_URL") or app.conf.broker_url or "")


def require_broker(app: Celery) -> str:
    url = broker_url(app)
    if not url:
        raise BrokerNotConfigured(
            f"the Celery app {app.main!r} has no broker URL: set CELERY_BROKER_URL in your "
            "Django settings (with config_from_object('django.conf:settings', namespace="
            "'CELERY')) or broker_url on the app, or name your app in OUTBOX_CELERY_APP"
        )
    return url
