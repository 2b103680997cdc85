"""A `django.tasks` task as a job kind: its name, and the KindSpec a worker runs it by.

The kind names the task's module path, plus its backend alias and Django queue when they
are not "default": `task:myapp.tasks.send_report`, `task:myapp.tasks.send_report@emails`,
`task:bulk/myapp.tasks.send_report@emails`. The queue is part of the kind because a kind
decides the Celery queue of every message of its jobs (retries and hand-overs included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, Task

from jobs.models import Job
from jobs.registry import TASK_KIND_PREFIX, KindSpec

from .execution import task_handler, task_outcome_hook
from .options import BackendOptions, task_settings

KIND_VERSION = 1  # a task's code version is its deploy: workers import what they have
# Backend aliases and queue names that fit in a kind (no "/" or "@").
NAME = re.compile(r"\A[A-Za-z0-9_.-]+\Z")
_MODULE_PATH = re.compile(r"\A[A-Za-z_]\w*(\.[A-Za-z_]\w*)+\Z")
_KIND_MAX_LENGTH = Job._meta.get_field("kind").max_length or 100


@dataclass(frozen=True)
class TaskKind:
    """Which function, on which backend alias and Django queue."""

    module_path: str
    alias: str = DEFAULT_TASK_BACKEND_ALIAS
    queue_name: str = DEFAULT_TASK_QUEUE_NAME

    @classmethod
    def of(cls, task: Task[Any, Any]) -> TaskKind:
        return cls(task.module_path, task.backend, task.queue_name)

    @property
    def name(self) -> str:
        alias = "" if self.alias == DEFAULT_TASK_BACKEND_ALIAS else f"{self.alias}/"
        queue = "" if self.queue_name == DEFAULT_TASK_QUEUE_NAME else f"@{self.queue_name}"
        return f"{TASK_KIND_PREFIX}{alias}{self.module_path}{queue}"

    @classmethod
    def parse(cls, kind: str) -> TaskKind | None:
        """The task a kind names; None when it is not a task's kind."""
        if not kind.startswith(TASK_KIND_PREFIX):
            return None
        rest = kind.removeprefix(TASK_KIND_PREFIX)
        alias, _, rest = rest.rpartition("/")
        path, _, queue = rest.partition("@")
        parsed = cls(path, alias or DEFAULT_TASK_BACKEND_ALIAS, queue or DEFAULT_TASK_QUEUE_NAME)
        return None if parsed.problem() else parsed

    def problem(self) -> str | None:
        """Why this task cannot be a job kind, or None."""
        if not _MODULE_PATH.fullmatch(self.module_path):
            return f"{self.module_path!r} is not an importable module path"
        for what, value in (("backend alias", self.alias), ("queue name", self.queue_name)):
            if not NAME.fullmatch(value):
                return f"{what} {value!r} must be letters, digits, '_', '.' or '-'"
        if len(self.name) > _KIND_MAX_LENGTH:
            return (
                f"its job kind {self.name!r} is longer than {_KIND_MAX_LENGTH} characters; "
                "use a shorter module path, function or queue name"
            )
        return None


def task_spec(task: Task[Any, Any], options: BackendOptions) -> KindSpec:
    """The kind of `task` (as `.using()` placed it on a backend and queue)."""
    merged = task_settings(task, options)
    return KindSpec(
        kind=TaskKind.of(task).name,
        version=KIND_VERSION,
        fn=task_handler(task),
        policy=merged.policy,
        lease_seconds=merged.lease_seconds,
        responsible=merged.responsible,
        queue=options.celery_queue(task.queue_name),
        input_schema=merged.input_schema,
        on_outcome=task_outcome_hook(task),
    )
