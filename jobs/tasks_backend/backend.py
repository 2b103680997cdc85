"""`DurableJobsBackend`: Django's Tasks framework on durable jobs.

`TASKS = {"default": {"BACKEND": "jobs.tasks_backend.DurableJobsBackend"}}`. A task's
enqueue is `jobs.submit` of a job of the task's kind (jobs.tasks_backend.kinds): the job, its
event and its outbox row commit together, in the caller's transaction when there is one.
Workers are our Celery workers (`jobs.execute`): the fenced claim, heartbeats, classified
retries, quarantine and reconciliation apply as to any kind. Results are read from the job
row and its event trail (jobs.tasks_backend.results). docs/django-tasks.md has the whole story.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, cast

import jsonschema
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.checks import CheckMessage, Error
from django.core.signals import setting_changed
from django.db import transaction
from django.dispatch import receiver
from django.tasks import DEFAULT_TASK_QUEUE_NAME, Task, TaskResult, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.module_loading import import_string

from jobs import registry
from jobs.registry import KindSpec
from jobs.submission import job_submit

from .execution import json_round_trip
from .kinds import NAME, TaskKind, task_spec
from .options import BackendOptions, DurableTask, key_format, task_settings
from .results import job_events, job_of_result_id, task_result_new, task_result_of

logger = logging.getLogger(__name__)

_KEY_MAX_LENGTH = 200  # Job.business_key and Job.serialization_key


class DurableJobsBackend(BaseTaskBackend):
    """Every `@task` of this backend runs as a durable job on our Celery workers."""

    task_class = DurableTask
    supports_defer = True  # run_after: the job's first due time
    supports_async_task = True  # `async def` tasks run through async_to_sync in the worker
    supports_get_result = True  # from the job row, in any process
    supports_priority = True  # Job.priority: Django's range and meaning, higher runs first

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.durable_options, self.problems = BackendOptions.parse(self.options)

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's rules, then ours: a kind name that fits, valid per-task options."""
        super().validate_task(task)
        problem = TaskKind.of(task).problem()
        if problem:
            raise InvalidTask(f"{task.module_path}: {problem}.")
        try:
            merged = task_settings(task, self.durable_options)
            if merged.input_schema is not None:
                schema = merged.input_schema
                jsonschema.validators.validator_for(schema).check_schema(schema)
        except (TypeError, ValueError, jsonschema.SchemaError) as exc:
            raise InvalidTask(f"{task.module_path}: {exc}") from exc

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        """Accept the task's job; inside the caller's transaction it commits with their rows
        (a rollback leaves nothing and nothing runs), outside one it commits itself."""
        if self.problems:
            raise InvalidTaskBackend(f"TASKS[{self.alias!r}]: " + "; ".join(self.problems))
        self.validate_task(task)
        kind = TaskKind.of(task).name
        if registry.kind_latest_or_none(kind) is None:
            raise InvalidTask(
                f"{task.module_path} does not import as a Task of backend {self.alias!r}; "
                "workers import tasks by this path"
            )
        data = json_round_trip({"args": list(args), "kwargs": dict(kwargs)})
        merged = task_settings(task, self.durable_options)
        job = job_submit(
            kind=kind,
            input=data,
            owner=task_owner(self.durable_options.owner),
            business_key=_key(task, "business_key", merged.business_key, data),
            serialization_key=_key(task, "serialization_key", merged.serialization_key, data),
            run_after=task.run_after,
            priority=task.priority,
        )
        if getattr(job, "replayed", False):  # its business_key's job, enqueued before
            return task_result_of(job, job_events(job), task)
        result = task_result_new(job, task)
        # Enqueued means committed: a rolled-back enqueue sends nothing.
        transaction.on_commit(partial(task_enqueued.send, type(self), task_result=result))
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The task's result read from its job; TaskResultDoesNotExist for an id that is no
        task job of this backend (another kind's job is not a task result)."""
        job = job_of_result_id(result_id)
        kind = TaskKind.parse(job.kind)
        if kind is None or kind.alias != self.alias:
            raise TaskResultDoesNotExist(result_id)
        task = task_of_kind(job.kind)
        if task is None:
            raise TaskResultDoesNotExist(f"{result_id}: its task {kind.module_path} is gone")
        return task_result_of(job, job_events(job), task)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        errors: list[CheckMessage] = [
            Error(f"TASKS[{self.alias!r}]['OPTIONS']: {problem}.", id="jobs.E101")
            for problem in self.problems
        ]
        errors += [
            Error(
                f"TASKS[{self.alias!r}]['QUEUES']: {queue!r} must be letters, digits, '_', "
                "'.' or '-' (it becomes part of a job kind).",
                id="jobs.E102",
            )
            for queue in sorted(self.queues)
            if not NAME.fullmatch(queue)
        ]
        return errors


def _key(task: Task[Any, Any], name: str, template: Any, data: dict[str, Any]) -> str | None:
    try:
        key = key_format(template, data["args"], data["kwargs"])
    except (KeyError, IndexError) as exc:
        raise InvalidTask(f"{task.module_path}: {name} needs argument {exc}") from exc
    if key is not None and len(key) > _KEY_MAX_LENGTH:
        raise InvalidTask(f"{task.module_path}: {name} is over {_KEY_MAX_LENGTH} characters")
    return key


def task_owner(username: str) -> User:
    """The user that owns task jobs (Django tasks have none), created on first use inactive
    and without a usable password: it cannot log in and its API tokens are refused."""
    user_model = get_user_model()
    lookup: dict[str, Any] = {user_model.USERNAME_FIELD: username}
    user, created = user_model._default_manager.get_or_create(defaults=None, **lookup)
    if created:
        user.set_unusable_password()
        if hasattr(user, "is_active"):
            user.is_active = False
        user.save()
    return user


def task_of_kind(kind: str) -> Task[Any, Any] | None:
    """The task a kind names, imported by its path and placed on its backend and queue.

    None (logged) for anything that is not a Task on one of our backends: a job row is data,
    and a worker imports nothing else by it."""
    parsed = TaskKind.parse(kind)
    if parsed is None:
        return None
    try:
        found = import_string(parsed.module_path)
    except ImportError:
        logger.warning("task kind %s: %s does not import here", kind, parsed.module_path)
        return None
    except Exception:  # its module fails to import: a worker that cannot run it
        logger.exception("task kind %s: importing %s failed", kind, parsed.module_path)
        return None
    try:
        backend = task_backends[parsed.alias]
    except InvalidTaskBackend:
        logger.error("task kind %s: no task backend %r", kind, parsed.alias)
        return None
    if not isinstance(found, Task) or not isinstance(backend, DurableJobsBackend):
        logger.error("task kind %s: not a Task of a DurableJobsBackend; refused", kind)
        return None
    try:
        task = found.using(queue_name=parsed.queue_name, backend=parsed.alias)
    except InvalidTask as exc:
        logger.error("task kind %s: %s", kind, exc)
        return None
    return task if TaskKind.of(task) == parsed else None


def task_kind_load(kind: str) -> KindSpec | None:
    """The registry's loader of "task:" kinds (jobs.registry): the KindSpec, or None."""
    task = task_of_kind(kind)
    if task is None:
        return None
    backend = cast(DurableJobsBackend, task.get_backend())
    return task_spec(task, backend.durable_options)


def task_celery_queues() -> set[str]:
    """The Celery queues the Django queues of every DurableJobsBackend in TASKS map to (a
    worker consuming one gets the jobs queue checks at start-up; jobs.worker_checks)."""
    found: set[str] = set()
    for params in getattr(settings, "TASKS", {}).values():
        try:
            backend_class = import_string(params["BACKEND"])
        except (ImportError, KeyError, TypeError, AttributeError):
            continue
        if not (isinstance(backend_class, type) and issubclass(backend_class, DurableJobsBackend)):
            continue
        options, _ = BackendOptions.parse(params.get("OPTIONS", {}))
        queues = params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME])
        found |= {options.celery_queue(queue) for queue in queues}
    return found


@receiver(setting_changed)
def _forget_task_kinds(*, setting: str, **kwargs: Any) -> None:
    """Task kinds were built from TASKS (and JOBS_*): build them again after a change."""
    if setting == "TASKS" or setting.startswith("JOBS_"):
        registry.forget_loaded()
