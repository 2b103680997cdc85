from __future__ import annotations

from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "outbox"
    default_auto_field = "django.db.models.BigAutoField"
