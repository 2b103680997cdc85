"""Handler registry: `@handler("kind.name", version=1, ...)` and the kinds a process knows."""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import jsonschema
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from .conf import jobs_settings
from .exceptions import UnknownKind, ValidationFailed
from .retry import RetryPolicy
from .ticks import CATCH_UP_SECONDS, CatchUp, ScheduleSpec, catch_up_check

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from .leases import Lease
    from .models import Tenant
    from .outcomes import Outcome

# fn(ctx, input) -> result, ctx a jobs.context.JobContext. Not named here: the context (the
# handler's API, which submits follow-ups through the registry) sits above the registry.
HandlerFn = Callable[[Any, dict[str, Any]], dict[str, Any]]

# Django's task priority range (django.tasks): higher runs first; jobs_job_priority_range.
PRIORITY_MIN, PRIORITY_MAX = -100, 100


def priority_check(priority: object) -> int:
    """`priority` when it is an int in PRIORITY_MIN..PRIORITY_MAX, else ValueError."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an integer, not {type(priority).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise ValueError(
            f"priority {priority} is out of range {PRIORITY_MIN}..{PRIORITY_MAX} "
            "(higher runs first)"
        )
    return priority


class SubmitCheck(Protocol):
    """Refuses a submission whose input names rows outside its tenant: raise Forbidden."""

    def __call__(self, *, owner: User, tenant: Tenant | None, input: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class KindSpec:
    """Everything the runtime needs to know about one version of one kind."""

    kind: str
    version: int
    fn: HandlerFn
    policy: RetryPolicy
    lease_seconds: float
    responsible: str
    queue: str = "jobs"  # handler() passes JOBS_QUEUE when the kind names none
    input_schema: dict[str, Any] | None = None
    tenant_limit: int | None = None
    kind_limit: int | None = None
    authorize_submit: SubmitCheck | None = None
    # May the relay put several jobs of this kind in one message (jobs.batch)? False for
    # long or CPU-bound handlers: each job then gets its own message and prefork process.
    batch: bool = True
    # The default priority of its jobs (Django's task range and meaning: -100..100, higher
    # runs first); a submit's `priority=` overrides it.
    priority: int = 0
    # Called by the worker once an attempt's outcome committed (jobs.runtime); its errors are
    # logged and never change the outcome. The `django.tasks` backend sends task_finished.
    on_outcome: Callable[[Lease, Outcome], None] | None = None
    # Its periodic schedule (`@handler(schedule="0 3 * * *")`): one job per tick, named
    # after the kind (jobs.scheduler).
    schedule: ScheduleSpec | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Built once: jsonschema.validate() would check the schema itself again on every call.
    validator: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        priority_check(self.priority)
        if self.input_schema is not None:
            cls = jsonschema.validators.validator_for(self.input_schema)
            cls.check_schema(self.input_schema)
            object.__setattr__(self, "validator", cls(self.input_schema))

    def validate(self, data: Any) -> None:
        if self.validator is None:
            return
        # The most relevant error, as jsonschema.validate() reports it.
        error = jsonschema.exceptions.best_match(self.validator.iter_errors(data))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(root)"
            # The schema's rule, never the input's value (jsonschema's message quotes it).
            rule = f"{error.validator} {json.dumps(error.validator_value, default=str)}"[:200]
            raise ValidationFailed(
                f"input does not match {self.kind}: {where}: {error.message}",
                summary=f"input does not match {self.kind}: {where}: {rule}",
            )


_registry: dict[str, dict[int, KindSpec]] = {}

# What a kind submittable over HTTP is named (the API validates and publishes it; a kind
# named otherwise can be submitted from Python only, and the system check jobs.W001 says so).
KIND_PATTERN = r"\A[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\Z"
KIND_MAX_LENGTH = 100


def kind_name_for_http(kind: str) -> bool:
    return len(kind) <= KIND_MAX_LENGTH and re.fullmatch(KIND_PATTERN, kind) is not None


# A `django.tasks` task is a kind named "task:<module path>" (jobs.tasks_backend), registered
# on first use instead of at import: a worker imports the task by its path when a job of it
# arrives, so it needs no list of task modules. Kept apart from `_registry`: `kinds()` lists
# what the HTTP API accepts, and these are not submittable there.
TASK_KIND_PREFIX = "task:"
_loaded: dict[str, KindSpec] = {}


@dataclass(frozen=True)
class LazyKinds:
    """Kinds registered on first use: `load(kind)` builds the spec (None: not one of ours),
    `queues()` names the queues they can be published to. Plugged in by JobsConfig.ready, so
    the registry imports nothing of the code that provides them."""

    load: Callable[[str], KindSpec | None]
    queues: Callable[[], set[str]]


_lazy: list[LazyKinds] = []


def lazy_kinds_add(source: LazyKinds) -> None:
    if source not in _lazy:
        _lazy.append(source)


def _load(kind: str) -> KindSpec | None:
    """The spec of a "task:" kind, imported on first use; None when it names no task of ours."""
    if not kind.startswith(TASK_KIND_PREFIX):
        return None
    spec = _loaded.get(kind)
    for source in _lazy:
        if spec is not None:
            break
        spec = source.load(kind)
        if spec is not None:
            _loaded[kind] = spec
    return spec


def handler(
    kind: str,
    *,
    version: int = 1,
    max_attempts: int = 5,
    max_elapsed: float = 3600.0,
    lease_seconds: float | None = None,
    base_delay: float = 1.0,
    max_delay: float = 300.0,
    retry_unknown: bool = True,
    responsible: str = "operators",
    queue: str | None = None,
    input_schema: dict[str, Any] | None = None,
    tenant_limit: int | None = None,
    kind_limit: int | None = None,
    authorize_submit: SubmitCheck | None = None,
    batch: bool = True,
    priority: int = 0,
    schedule: str | None = None,
    timezone: str = "UTC",
    catch_up: CatchUp | str = CatchUp.SKIP_OLDER,
    catch_up_seconds: int = CATCH_UP_SECONDS,
    schedule_input: dict[str, Any] | None = None,
) -> Callable[[HandlerFn], HandlerFn]:
    """Register `fn(ctx, input) -> dict` as the handler of `kind` at `version`.

    `schedule` (a cron expression, 5 fields or 6 with seconds first, in `timezone`) submits
    one job of the kind per tick with `schedule_input`; `catch_up` says which ticks a late
    ticker still runs (jobs.ticks.CatchUp). A bad schedule raises ScheduleInvalid here."""
    if input_schema is not None:
        jsonschema.Draft202012Validator.check_schema(input_schema)
    periodic = _schedule_of(kind, schedule, timezone, catch_up, catch_up_seconds, schedule_input)

    def register(fn: HandlerFn) -> HandlerFn:
        spec = KindSpec(
            kind=kind,
            version=version,
            fn=fn,
            policy=RetryPolicy(
                max_attempts=max_attempts,
                max_elapsed=max_elapsed,
                base_delay=base_delay,
                max_delay=max_delay,
                retry_unknown=retry_unknown,
            ),
            lease_seconds=lease_seconds or jobs_settings.DEFAULT_LEASE_SECONDS,
            responsible=responsible,
            queue=queue or jobs_settings.QUEUE,
            input_schema=input_schema,
            tenant_limit=tenant_limit,
            kind_limit=kind_limit,
            authorize_submit=authorize_submit,
            batch=batch,
            priority=priority,
            schedule=periodic,
        )
        _registry.setdefault(kind, {})[version] = spec
        return fn

    return register


def _schedule_of(
    kind: str,
    cron: str | None,
    timezone: str,
    catch_up: CatchUp | str,
    catch_up_seconds: int,
    schedule_input: dict[str, Any] | None,
) -> ScheduleSpec | None:
    """The kind's schedule (named after the kind) from `@handler`'s arguments, or None."""
    if cron is None:
        return None
    return ScheduleSpec(
        name=kind,
        kind=kind,
        cron=cron,
        timezone=timezone,
        catch_up=catch_up_check(catch_up),
        catch_up_seconds=catch_up_seconds,
        input=dict(schedule_input or {}),
    )


def kind_latest(kind: str) -> KindSpec:
    """The newest version of `kind` this process knows (what submissions record)."""
    versions = _registry.get(kind)
    if not versions:
        spec = _load(kind)
        if spec is None:
            raise UnknownKind(f"unknown job kind {kind!r}")
        return spec
    return versions[max(versions)]


def kind_latest_or_none(kind: str) -> KindSpec | None:
    versions = _registry.get(kind)
    return versions[max(versions)] if versions else _load(kind)


def kind_version(kind: str, version: int) -> KindSpec | None:
    """The exact version, or None when this process cannot run it (a rolling deploy)."""
    spec = _registry.get(kind, {}).get(version)
    if spec is None and kind.startswith(TASK_KIND_PREFIX):
        loaded = _load(kind)
        return loaded if loaded is not None and loaded.version == version else None
    return spec


def kinds() -> list[str]:
    return sorted(_registry)


def schedules() -> list[ScheduleSpec]:
    """The schedules of the registered kinds (each kind's newest version decides)."""
    found = (kind_latest(kind).schedule for kind in sorted(_registry))
    return [schedule for schedule in found if schedule is not None]


def unregister(kind: str) -> None:
    """Forget a kind (tests)."""
    _registry.pop(kind, None)
    _loaded.pop(kind, None)


def forget_loaded() -> None:
    """Forget every "task:" kind loaded so far (their backend's settings changed)."""
    _loaded.clear()


def autoload() -> None:
    """Import every installed app's `kinds` module (JOBS_AUTODISCOVER_KINDS), then every
    module in JOBS_HANDLER_MODULES: importing them registers their kinds."""
    if jobs_settings.AUTODISCOVER_KINDS:
        autodiscover_modules("kinds")
    modules = jobs_settings.HANDLER_MODULES
    problem = jobs_settings.declared["HANDLER_MODULES"].problem(modules)
    if problem:
        raise ImproperlyConfigured(f"JOBS_HANDLER_MODULES {problem}")
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"JOBS_HANDLER_MODULES names {module!r}, which cannot be imported: {exc}"
            ) from exc


def queues() -> set[str]:
    """The queues of every registered kind, and those lazily registered kinds can use."""
    found = {spec.queue for versions in _registry.values() for spec in versions.values()}
    for source in _lazy:
        found |= source.queues()
    return found
