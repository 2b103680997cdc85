"""The example project's own checks: production static files were collected for production.

Production serves hashed names from the staticfiles manifest that `collectstatic` writes with
the production storage; files collected with development settings (`make setup` without
`DJANGO_ENV=production`) have none, and every page that links a stylesheet answers 500
(`Missing staticfiles manifest entry`). `manage.py check --deploy` reports it (jobsite.E001,
jobsite.E002) and the production web server refuses to start on it (jobsite/asgi.py).
"""

from __future__ import annotations

import os
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register
from django.core.exceptions import ImproperlyConfigured

COLLECT_HINT = (
    "collect them with the production settings: `DJANGO_ENV=production python manage.py "
    "collectstatic --noinput` with the same DJANGO_STATIC_ROOT (`DJANGO_ENV=production make "
    "setup` does it; the Dockerfile does it at build)"
)


class StaticFilesNotCollected(ImproperlyConfigured):
    """Production static files without (or with an outdated) manifest: the web server does not
    start."""


def _static_files_found() -> set[str]:
    """Every path `collectstatic` would collect, as the manifest names them."""
    from django.apps import apps
    from django.contrib.staticfiles import finders
    from django.contrib.staticfiles.apps import StaticFilesConfig

    config = apps.get_app_config("staticfiles")  # a project's own subclass may change them
    assert isinstance(config, StaticFilesConfig)
    ignore = config.ignore_patterns
    found = set()
    for finder in finders.get_finders():
        for path, source in finder.list(ignore):
            prefix = getattr(source, "prefix", None)
            found.add(os.path.join(prefix, path) if prefix else path)
    return found


def static_manifest_problem() -> tuple[str, str] | None:
    """(check id, message) when the static storage needs a manifest this STATIC_ROOT lacks or
    that lacks files of the installed apps; None when it needs none or has a complete one."""
    from django.conf import settings
    from django.contrib.staticfiles.storage import ManifestFilesMixin, staticfiles_storage

    try:
        if not isinstance(staticfiles_storage, ManifestFilesMixin):
            return None
        paths, _ = staticfiles_storage.load_manifest()
    except ValueError as exc:  # a manifest that is not JSON or of another version
        return "jobsite.E001", f"{exc} in {settings.STATIC_ROOT}; {COLLECT_HINT}"
    manifest = os.path.join(str(settings.STATIC_ROOT), staticfiles_storage.manifest_name)
    if not paths:
        return "jobsite.E001", (
            f"production static files need {manifest}, which does not exist: STATIC_ROOT was "
            f"never collected, or collected with development settings; {COLLECT_HINT}"
        )
    missing = sorted(_static_files_found() - set(paths))
    if missing:
        return "jobsite.E002", (
            f"{manifest} lacks {len(missing)} static file(s) of the installed apps (first: "
            f"{missing[0]}): collected before they changed; {COLLECT_HINT}"
        )
    return None


@register(Tags.staticfiles, deploy=True)
def check_static_manifest(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`check --deploy`: the manifest production static files are served by is complete."""
    problem = static_manifest_problem()
    if problem is None:
        return []
    check_id, message = problem
    return [Error(message, id=check_id)]


def require_static_manifest() -> None:
    """The web server's start-up refusal: a missing manifest would make every page a 500."""
    problem = static_manifest_problem()
    if problem is not None:
        check_id, message = problem
        raise StaticFilesNotCollected(f"{check_id}: {message}")
