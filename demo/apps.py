from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The example project's kinds, drills, guided demo, capacity model and stand-in provider."""

    name = "demo"
    default_auto_field = "django.db.models.BigAutoField"
