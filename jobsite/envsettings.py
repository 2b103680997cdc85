"""The example project's twelve-factor bridge: any JOBS_* / OUTBOX_* setting from the env."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from jobs.conf import JobsSettings
from outbox.conf import OutboxSettings, Setting


def parse(spec: Setting[Any], raw: str) -> Any:
    """The text of an environment variable as the type of the setting's default."""
    kind = type(spec.default)
    if kind is bool:
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if kind is list:
        return [item.strip() for item in raw.split(",") if item.strip()]
    if kind in (int, float, dict):  # a dict (JOBS_SCHEDULES) as JSON
        try:
            return json.loads(raw)
        except ValueError:
            return raw  # left as text: the system check names the setting and the value
    return raw


def library_settings_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """{"JOBS_X": value} for every declared library setting the environment sets."""
    found = {}
    for cls in (JobsSettings, OutboxSettings):
        for name, spec in cls.declared.items():
            raw = environ.get(cls.prefix + name)
            if raw is not None:
                found[cls.prefix + name] = parse(spec, raw)
    return found


def env_number[N: (int, float)](environ: Mapping[str, str], name: str, default: N) -> N:
    """The environment's `name` as the type of `default` (its value when unset); a value of
    another shape stops the start-up with the variable's name, not Python's bare
    ValueError."""
    raw = environ.get(name)
    if raw is None:
        return default
    kind = type(default)
    try:
        return kind(raw.strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not {what} (unset, it is {default})"
        ) from None
