"""What a task runs with: the backend's OPTIONS, the task's own options, and the two merged.

`TASKS[alias]["OPTIONS"]` gives the defaults of every task of that backend; Django 6.1's
`@task(max_attempts=3, ...)` passes a task's own (DurableTask), which win where they are set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from django.tasks import DEFAULT_TASK_QUEUE_NAME, Task

from jobs.conf import jobs_settings
from jobs.retry import RetryPolicy

if TYPE_CHECKING:
    _TaskBase = Task[Any, Any]
else:
    _TaskBase = Task

# A business or serialization key: a str.format template over the call's arguments
# ("customer:{customer_id}", "{0}"), or a function of them returning the key (or None).
KeyTemplate = str | Callable[..., str | None]

POLICY_OPTIONS = ("max_attempts", "max_elapsed", "base_delay", "max_delay", "retry_unknown")


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _queue_map(value: Any) -> bool:
    return isinstance(value, Mapping) and all(_text(k) and _text(v) for k, v in value.items())


# Each option's rule and what the system check says when a value breaks it.
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_attempts": (lambda v: _positive(v) and isinstance(v, int), "a whole number >= 1"),
    "max_elapsed": (_positive, "a number of seconds > 0"),
    "base_delay": (_positive, "a number of seconds > 0"),
    "max_delay": (_positive, "a number of seconds > 0"),
    "retry_unknown": (lambda v: isinstance(v, bool), "True or False"),
    "lease_seconds": (lambda v: v is None or _positive(v), "a number of seconds > 0, or None"),
    "responsible": (_text, "a non-empty string"),
    "owner": (_text, "a non-empty username"),
    "celery_queues": (_queue_map, "a mapping of Django queue names to Celery queues"),
}


@dataclass(frozen=True)
class BackendOptions:
    """`TASKS[alias]["OPTIONS"]`: the defaults of the backend's tasks, whose user owns their
    jobs, and which Celery queue each Django queue is published to."""

    max_attempts: int = 5
    max_elapsed: float = 3600.0
    base_delay: float = 1.0
    max_delay: float = 300.0
    retry_unknown: bool = True
    lease_seconds: float | None = None  # None: JOBS_DEFAULT_LEASE_SECONDS
    responsible: str = "operators"
    owner: str = "django-tasks"
    celery_queues: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Any) -> tuple[BackendOptions, list[str]]:
        """The options, and what is wrong with them (each wrong value keeps its default)."""
        if not isinstance(raw, Mapping):
            return cls(), ["must be a dict"]
        known = {f.name for f in fields(cls)}
        problems = [f"unknown option {name!r}" for name in sorted(set(raw) - known)]
        values = {}
        for name in sorted(set(raw) & known):
            valid, expected = _RULES[name]
            if valid(raw[name]):
                values[name] = raw[name]
            else:
                problems.append(f"{name!r} must be {expected}, not {raw[name]!r}")
        options = cls(**values)
        try:
            options.policy()
        except ValueError as exc:
            problems.append(str(exc))
            return cls(), problems
        return options, problems

    def policy(self) -> RetryPolicy:
        return RetryPolicy(**{name: getattr(self, name) for name in POLICY_OPTIONS})

    def celery_queue(self, queue_name: str) -> str:
        """The Celery queue of a Django queue: `celery_queues` names it; else Django's
        "default" is JOBS_QUEUE and any other queue keeps its name."""
        mapped = self.celery_queues.get(queue_name)
        if mapped:
            return mapped
        return jobs_settings.QUEUE if queue_name == DEFAULT_TASK_QUEUE_NAME else queue_name


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTask(_TaskBase):
    """Django's Task with our per-task options, which `@task(...)` passes on Django 6.1.

    None leaves an option to the backend's OPTIONS. The keys are templates over the call's
    arguments (KeyTemplate): `business_key` makes one job per key (an enqueue with the same
    key and arguments returns the first job's result), `serialization_key` runs the jobs of
    one key one at a time, in order.
    """

    max_attempts: int | None = None
    max_elapsed: float | None = None
    base_delay: float | None = None
    max_delay: float | None = None
    retry_unknown: bool | None = None
    lease_seconds: float | None = None
    responsible: str | None = None
    input_schema: dict[str, Any] | None = None
    business_key: KeyTemplate | None = None
    serialization_key: KeyTemplate | None = None


@dataclass(frozen=True)
class TaskSettings:
    """One task's options merged with its backend's: what its job kind runs with."""

    policy: RetryPolicy
    lease_seconds: float
    responsible: str
    input_schema: dict[str, Any] | None
    business_key: KeyTemplate | None
    serialization_key: KeyTemplate | None


def task_settings(task: Task[Any, Any], options: BackendOptions) -> TaskSettings:
    """The task's own options where set, else the backend's; ValueError/TypeError if invalid.

    A plain Task (another backend's task class, `.using(backend=...)`) has no options of its
    own: the backend's apply."""

    def pick(name: str) -> Any:
        own = getattr(task, name, None)
        if own is None:
            return getattr(options, name)
        valid, expected = _RULES[name]
        if not valid(own):
            raise ValueError(f"{task.module_path}: {name} must be {expected}, not {own!r}")
        return own

    def key(name: str) -> KeyTemplate | None:
        value = getattr(task, name, None)
        if value is not None and not (isinstance(value, str) or callable(value)):
            raise TypeError(f"{task.module_path}: {name} must be a str template or a function")
        return value

    schema = getattr(task, "input_schema", None)
    if schema is not None and not isinstance(schema, dict):
        raise TypeError(f"{task.module_path}: input_schema must be a JSON Schema (a dict)")
    return TaskSettings(
        policy=RetryPolicy(**{name: pick(name) for name in POLICY_OPTIONS}),
        lease_seconds=pick("lease_seconds") or jobs_settings.DEFAULT_LEASE_SECONDS,
        responsible=pick("responsible"),
        input_schema=schema,
        business_key=key("business_key"),
        serialization_key=key("serialization_key"),
    )


def key_format(template: KeyTemplate | None, args: list[Any], kwargs: dict[str, Any]) -> str | None:
    """A business or serialization key for one call; KeyError/IndexError when the template
    names an argument the call does not pass."""
    if template is None:
        return None
    value = template(*args, **kwargs) if callable(template) else template.format(*args, **kwargs)
    return str(value) if value else None
