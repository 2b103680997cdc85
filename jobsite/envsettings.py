"""The example project's twelve-factor bridge: any JOBS_* / OUTBOX_* setting from the env."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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
