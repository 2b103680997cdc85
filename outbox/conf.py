"""Settings with defaults, read in one place: `outbox_settings.RELAY_INTERVAL` reads
`settings.OUTBOX_RELAY_INTERVAL` or its default.

A project sets none of them to start. A value of the wrong type or out of range is reported
by Django's system checks (`manage.py check`, and at every start-up), naming the setting.
`AppSettings` is shared with `jobs.conf`; DRF's `api_settings` is the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from django.conf import settings as django_settings
from django.core.signals import setting_changed


@dataclass(frozen=True)
class Setting:
    """One setting: its default (which also gives its type), what it is for, its range."""

    default: Any
    doc: str
    minimum: float | None = None
    positive: bool = False

    def problem(self, value: Any) -> str | None:
        """Why `value` is not acceptable, or None."""
        expected = type(self.default)
        if expected is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        elif expected is list:
            ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        else:
            ok = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
        if not ok:
            return f"must be a {_TYPE_NAMES[expected]}, got {type(value).__name__} {value!r}"
        if self.positive and value <= 0:
            return f"must be greater than 0, got {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum:g}, got {value!r}"
        return None


_TYPE_NAMES = {
    float: "number",
    int: "whole number",
    bool: "boolean",
    str: "string",
    list: "list of strings",
}


class AppSettings:
    """Attribute access to `<PREFIX><NAME>` settings with declared defaults.

    Values are cached per name and forgotten when a test overrides a setting
    (`setting_changed`), so reading one on a hot path costs a dict lookup.
    """

    prefix: ClassVar[str]
    declared: ClassVar[dict[str, Setting]]

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}
        setting_changed.connect(self._on_setting_changed, weak=False)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.declared:
            raise AttributeError(f"{type(self).__name__} has no setting {name!r}")
        try:
            return self._cache[name]
        except KeyError:
            value = getattr(django_settings, self.prefix + name, self.declared[name].default)
            self._cache[name] = value
            return value

    def _on_setting_changed(self, *, setting: str, **kwargs: Any) -> None:
        if setting.startswith(self.prefix):
            self._cache.pop(setting[len(self.prefix) :], None)

    def problems(self) -> list[tuple[str, str]]:
        """(setting, problem) for every value of the wrong type or out of range."""
        found = []
        for name, spec in self.declared.items():
            full = self.prefix + name
            if not hasattr(django_settings, full):
                continue
            problem = spec.problem(getattr(django_settings, full))
            if problem:
                found.append((full, problem))
        return found

    def reference(self) -> list[tuple[str, Any, str]]:
        """(setting, default, doc) for every declared setting: the documented table."""
        return [(self.prefix + n, s.default, s.doc) for n, s in self.declared.items()]


class OutboxSettings(AppSettings):
    prefix = "OUTBOX_"
    declared = {
        "CELERY_APP": Setting(
            "",
            "Dotted path of the Celery app the outbox publishes through; empty: the current app "
            "(the one your project's celery.py creates).",
        ),
        "FAST_PATH": Setting(True, "Publish a due row right after its transaction commits."),
        "RELAY_INTERVAL": Setting(1.0, "Seconds between the beat's relay sweeps.", positive=True),
        "RELAY_BATCH_SIZE": Setting(500, "Rows one relay batch reserves.", positive=True),
        "BATCH_MAX": Setting(
            20,
            "Most rows one broker message carries when a batch rule packs them (1: never pack).",
            positive=True,
        ),
        "LINGER_SECONDS": Setting(
            0.05,
            "With company (other threads of the process submitting), the fast path's publisher "
            "waits at most this long for more rows to pack into one message (0: never waits). "
            "Alone, a row is published at once.",
            minimum=0,
        ),
        "RESERVATION_SECONDS": Setting(
            30.0, "How long a reserved row stays off other relays.", positive=True
        ),
        "MARK_INTERVAL": Setting(
            0.25,
            "The fast path marks what it published in batches this often (0: at once). "
            "At most a quarter of OUTBOX_RESERVATION_SECONDS.",
            minimum=0,
        ),
        "RETENTION_SECONDS": Setting(
            7 * 24 * 3600, "Published rows older than this are pruned.", positive=True
        ),
        "PUBLISH_BACKOFF_CAP": Setting(
            60.0, "Cap of the back-off of a row whose publish failed.", positive=True
        ),
        "MAINTENANCE_QUEUE": Setting(
            "jobs.maintenance",
            "Queue of the beat tasks: relay sweep, pruner, and jobs' reaper and reconciler.",
        ),
        "BEAT_SCHEDULE": Setting(
            True,
            "Add the maintenance tasks to your Celery app's beat schedule (entries you define "
            "under the same names win).",
        ),
    }

    CELERY_APP: str
    FAST_PATH: bool
    RELAY_INTERVAL: float
    RELAY_BATCH_SIZE: int
    BATCH_MAX: int
    LINGER_SECONDS: float
    RESERVATION_SECONDS: float
    MARK_INTERVAL: float
    RETENTION_SECONDS: int
    PUBLISH_BACKOFF_CAP: float
    MAINTENANCE_QUEUE: str
    BEAT_SCHEDULE: bool


outbox_settings = OutboxSettings()
