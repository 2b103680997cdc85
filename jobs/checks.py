"""System checks for JOBS_* settings (`manage.py check`, every start-up)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.urls import NoReverseMatch, reverse

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


# Registered here, where it is declared (JobsConfig.ready imports this module).
@register("jobs", Tags.urls)
def jobs_api_token_app(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The project authenticates with DRF tokens and mounts the API, but DRF's token app is
    missing: the API then takes sessions only (jobs.api.base). Sessions alone need no app."""
    from .api.base import TOKEN_APP  # the API's modules load when checks run, not at ready()

    mounted_somewhere = bool(getattr(settings, "ROOT_URLCONF", None))
    if apps.is_installed(TOKEN_APP) or not mounted_somewhere or not _project_uses_tokens():
        return []
    try:
        reverse("jobs-api:job-list")
    except NoReverseMatch:
        return []  # the API is not mounted
    return [
        Warning(
            f"REST_FRAMEWORK names TokenAuthentication and the jobs API is mounted, but "
            f"{TOKEN_APP!r} is not in INSTALLED_APPS: the API accepts session logins only, "
            "`Authorization: Token` is refused and `manage.py jobs_token` cannot issue tokens.",
            hint=f"Add {TOKEN_APP!r} to INSTALLED_APPS and run migrate.",
            id="jobs.W002",
        )
    ]


def _project_uses_tokens() -> bool:
    """Whether the project's own REST_FRAMEWORK authenticates with DRF's tokens."""
    from rest_framework.authentication import TokenAuthentication
    from rest_framework.settings import api_settings

    try:
        classes = api_settings.DEFAULT_AUTHENTICATION_CLASSES
    except ImportError:
        return False  # a class that does not import: DRF says so at its first request
    return any(isinstance(c, type) and issubclass(c, TokenAuthentication) for c in classes)


# What each libpq option bounds; 0 (or absent) means "wait forever" for all of them.
DATABASE_TIMEOUTS = {
    "connect_timeout": "a connect to an unreachable server",
    "keepalives_idle": "a wait for a reply on a connection whose server vanished",
    "tcp_user_timeout": "a write on a connection whose server vanished",
}


def database_timeouts_missing(database: Mapping[str, Any]) -> list[str]:
    """The options of DATABASE_TIMEOUTS a PostgreSQL database's OPTIONS lack (or set to 0)."""
    if not str(database.get("ENGINE", "")).endswith("postgresql"):
        return []
    options = database.get("OPTIONS") or {}
    missing = [name for name in DATABASE_TIMEOUTS if not options.get(name)]
    if str(options.get("keepalives", "1")) == "0" and "keepalives_idle" not in missing:
        missing.append("keepalives_idle")  # keepalives=0 turns them off whatever idle says
    return missing


def jobs_database_timeouts(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Invariant 8: no worker waits on the network without a deadline (docs/operations.md)."""
    missing = database_timeouts_missing(settings.DATABASES.get("default", {}))
    if not missing:
        return []
    unbounded = "; ".join(DATABASE_TIMEOUTS[name] for name in missing)
    return [
        Warning(
            f"DATABASES['default']['OPTIONS'] has no {', '.join(missing)}: unbounded {unbounded}. "
            "A worker cut off from PostgreSQL (a partition, a failover, a dropped NAT entry) "
            "then blocks in its claim or heartbeat for as long as the kernel keeps the dead "
            "connection (about 15 minutes of retransmissions, 2 hours of keepalive idle), "
            "logs nothing, keeps the messages it prefetched, and its lease expires without "
            "it knowing.",
            hint="Set e.g. OPTIONS = {'connect_timeout': 5, 'keepalives_idle': 5, "
            "'keepalives_interval': 2, 'keepalives_count': 3, 'tcp_user_timeout': 10000} "
            "(milliseconds), keeping tcp_user_timeout well below the lease; see "
            "docs/operations.md, 'Network timeouts'.",
            id="jobs.W010",
        )
    ]


def jobs_schedule_checks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Periodic schedules that cannot tick, or whose jobs nobody could own (jobs.scheduler)."""
    from .scheduler import schedule_definitions, schedule_from_setting
    from .ticks import ScheduleInvalid

    found: list[CheckMessage] = []
    owner = jobs_settings.SCHEDULE_OWNER
    if not owner or len(owner) > 150 or owner != owner.strip():
        found.append(
            Error(
                f"JOBS_SCHEDULE_OWNER must name a username (1 to 150 characters), not {owner!r}: "
                "the jobs of periodic schedules are owned by that user.",
                hint="Leave it unset ('jobs-scheduler', created on first use) or name a user.",
                id="jobs.E030",
            )
        )
    code = {spec.name for spec in registry.schedules()}
    for name, raw in jobs_settings.SCHEDULES.items():
        try:
            schedule_from_setting(name, raw)
        except ScheduleInvalid as exc:
            found.append(Error(str(exc), id="jobs.E031"))
        else:
            if name in code:
                found.append(
                    Warning(
                        f"JOBS_SCHEDULES[{name!r}] has the name of a @handler(schedule=...): "
                        "the setting's definition wins.",
                        id="jobs.W031",
                    )
                )
    if any(e.id == "jobs.E031" for e in found):
        return found
    for spec in schedule_definitions().values():
        kind = registry.kind_latest_or_none(spec.kind)
        if kind is None:
            found.append(
                Warning(
                    f"Schedule {spec.name!r} names the kind {spec.kind!r}, which this process "
                    "does not register: only a ticker whose process registers it ticks it.",
                    hint="Add the kind's module to JOBS_HANDLER_MODULES of the maintenance worker.",
                    id="jobs.W030",
                )
            )
            continue
        try:
            kind.validate(spec.input)
        except Exception as exc:
            found.append(
                Error(f"Schedule {spec.name!r}: its input does not fit: {exc}", id="jobs.E032")
            )
    return found
