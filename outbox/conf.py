"""Settings with defaults, read in one place: `outbox_settings.RELAY_INTERVAL` reads
`settings.OUTBOX_RELAY_INTERVAL` or its default.

A project sets none of them to start. A value of the wrong type or out of range is reported
by Django's system checks (`manage.py check`, and at every start-up), naming the setting.
`AppSettings` is shared with `jobs.conf`; DRF's `api_settings` is the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, overload

from django.conf import settings as django_settings
from django.core.signals import setting_changed


class Setting[T]:
    """One setting: its default (whose type is the setting's type, to mypy and to the system
    check), what it is for, its range.

    Declared on an `AppSettings` class as `NAME: Setting[int] = Setting(5, "...")`; reading
    `app_settings.NAME` gives `settings.<PREFIX>NAME` or the default, typed `int`. The value
    read is kept in the instance's `__dict__` (as `functools.cached_property` does), so later
    reads are plain attribute reads; a test's `override_settings` forgets it.
    """

    def __init__(
        self, default: T, doc: str, *, minimum: float | None = None, positive: bool = False
    ) -> None:
        self.default = default
        self.doc = doc
        self.minimum = minimum
        self.positive = positive
        self.name = ""

    def __set_name__(self, owner: type[AppSettings], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type[AppSettings]) -> Setting[T]: ...
    @overload
    def __get__(self, instance: AppSettings, owner: type[AppSettings]) -> T: ...
    def __get__(self, instance: AppSettings | None, owner: type[AppSettings]) -> Setting[T] | T:
        if instance is None:
            return self
        value: T = getattr(django_settings, instance.prefix + self.name, self.default)
        instance.__dict__[self.name] = value
        return value

    def problem(self, value: object) -> str | None:
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
        if not isinstance(value, int | float):
            return None
        if self.positive and value <= 0:
            return f"must be greater than 0, got {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum:g}, got {value!r}"
        return None


_TYPE_NAMES: dict[type, str] = {
    float: "number",
    int: "whole number",
    bool: "boolean",
    str: "string",
    list: "list of strings",
    dict: "dict",
}


class AppSettings:
    """`<PREFIX><NAME>` settings with declared defaults, one typed `Setting` attribute each.

    A value is read from Django's settings on first use and then kept, so reading one on a
    hot path is an attribute read; a test that overrides a setting (`setting_changed`)
    makes the next read fetch it again.
    """

    prefix: ClassVar[str]
    declared: ClassVar[dict[str, Setting[Any]]]  # name -> Setting, in declaration order

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.declared = {n: s for n, s in vars(cls).items() if isinstance(s, Setting)}

    def __init__(self) -> None:
        setting_changed.connect(self._on_setting_changed, weak=False)

    if not TYPE_CHECKING:  # to mypy a misspelt setting stays an error, not Any

        def __getattr__(self, name: str) -> Any:
            raise AttributeError(f"{type(self).__name__} has no setting {name!r}")

    def _on_setting_changed(self, *, setting: str, **kwargs: Any) -> None:
        if setting.startswith(self.prefix):
            self.__dict__.pop(setting[len(self.prefix) :], None)

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

    CELERY_APP: Setting[str] = Setting(
        "",
        "Dotted path of the Celery app the outbox publishes through; empty: the current app "
        "(the one your project's celery.py creates).",
    )
    FAST_PATH: Setting[bool] = Setting(
        True, "Publish a due row right after its transaction commits."
    )
    BROKER_PRIORITIES: Setting[bool] = Setting(
        True,
        "Publish each message with its band's broker priority, so a higher band already in "
        "the broker is delivered first (Redis: one list per band; RabbitMQ: queues declared "
        "with x-max-priority). False: every message in one FIFO.",
    )
    RELAY_INTERVAL: Setting[float] = Setting(
        1.0, "Seconds between the beat's relay sweeps.", positive=True
    )
    RELAY_BATCH_SIZE: Setting[int] = Setting(500, "Rows one relay batch reserves.", positive=True)
    SCAN_FLOOR_MARGIN_SECONDS: Setting[float] = Setting(
        5.0,
        "How far below the oldest live key a periodic scan (relay sweep, reaper, redelivery "
        "check) starts: room for rows that commit late or were stamped by a host whose clock "
        "is behind (outbox.floors).",
        minimum=0,
    )
    SCAN_FLOOR_FULL_SECONDS: Setting[float] = Setting(
        60.0,
        "Seconds between a periodic scan's walks from the start of its index: a row that "
        "committed later than the margin, below the floor, is found within this time.",
        positive=True,
    )
    BATCH_MAX: Setting[int] = Setting(
        20,
        "Most rows one broker message carries when a batch rule packs them (1: never pack).",
        positive=True,
    )
    LINGER_SECONDS: Setting[float] = Setting(
        0.05,
        "With company (other threads of the process submitting), the fast path's publisher "
        "waits at most this long for more rows to pack into one message (0: never waits). "
        "Alone, a row is published at once.",
        minimum=0,
    )
    RESERVATION_SECONDS: Setting[float] = Setting(
        30.0, "How long a reserved row stays off other relays.", positive=True
    )
    FASTPATH_MAX_ROWS: Setting[int] = Setting(
        10_000,
        "Most rows a process's fast-path publisher holds in memory (a slow or unreachable "
        "broker makes them wait); rows beyond it are left to the relay, which publishes them "
        "once their reservation (OUTBOX_RESERVATION_SECONDS) lapses.",
        positive=True,
    )
    MARK_INTERVAL: Setting[float] = Setting(
        0.25,
        "The fast path marks what it published in batches this often (0: at once). "
        "At most a quarter of OUTBOX_RESERVATION_SECONDS.",
        minimum=0,
    )
    RETENTION_SECONDS: Setting[int] = Setting(
        24 * 3600,
        "Published rows older than this are pruned, except each job's newest row, which goes "
        "with the job (it is the reconciler's and the redelivery check's proof that a due job "
        "had a message).",
        positive=True,
    )
    PUBLISH_BACKOFF_CAP: Setting[float] = Setting(
        60.0, "Cap of the back-off of a row whose publish failed.", positive=True
    )
    MAINTENANCE_QUEUE: Setting[str] = Setting(
        "jobs.maintenance",
        "Queue of the beat tasks: relay sweep, pruner, and jobs' reaper and reconciler.",
    )
    BEAT_SCHEDULE: Setting[bool] = Setting(
        True,
        "Add the maintenance tasks to your Celery app's beat schedule (entries you define "
        "under the same names win).",
    )


outbox_settings = OutboxSettings()
