from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Kinds that exist for drills and the guided demo: `drill.crash` kills its worker process.
DRILL_KIND_PREFIXES = ("drill.", "demo.")


def drill_kinds_registered() -> list[str]:
    """The drill and demo kinds this process would accept (from any source)."""
    from jobs import registry

    return [kind for kind in registry.kinds() if kind.startswith(DRILL_KIND_PREFIXES)]


class DemoConfig(AppConfig):
    """The example project's kinds, drills, guided demo, capacity model and stand-in provider."""

    name = "demo"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # After jobs' ready (INSTALLED_APPS order), which imported every kinds module.
        # A start-up refusal, not a system check: gunicorn and celery run no checks.
        found = drill_kinds_registered()
        if found and getattr(settings, "PRODUCTION", False):
            raise ImproperlyConfigured(
                f"drill kinds {', '.join(found)} are registered with DJANGO_ENV=production: "
                "anyone with an API token could submit them (drill.crash kills worker "
                "processes). Remove demo.drill_kinds / demo.demo_kinds from "
                "JOBS_HANDLER_MODULES."
            )
