"""Django's Tasks framework on jobs.tasks_backend, driven through Django's public API only.

Tasks live in tests/django_tasks_for_tests.py. Real `celery worker` subprocesses run them with
DJANGO_SETTINGS_MODULE=tests.settings_tasks (TASKS on our backend); this process sets the
same TASKS with pytest-django's `settings` and enqueues, reads and refreshes results as a
Django project would. Crashes are real: a worker SIGKILLed in the middle of a task.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.db import transaction
from django.tasks import TaskResult, TaskResultStatus, task, task_backends
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued
from django.test import Client

import jobs
from jobs import registry
from jobs.counters import DUPLICATE_EFFECTS, EFFECTS_REUSED, counter_value
from jobs.exceptions import TransientError, ValidationFailed
from jobs.models import EffectLedgerEntry, Job, JobEvent, QuarantineRecord
from jobs.ops.reconcile import reconcile_run
from jobs.reaper import jobs_reap
from jobs.services import job_cancel
from jobs.tasks_backend import JobCancelled, ReturnValueNotJSON, WorkerLost
from outbox.models import OutboxEntry
from tests.harness import ROOT, Harness, Proc, wait_until
from tests.integration.api_helpers import submit, token_client
from tests.settings_tasks import TASKS_FOR_TESTS

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_SETTINGS = "tests.settings_tasks"
CALLS_FILE_ENV = "JOBS_TEST_CALLS_FILE"
README = ROOT / "README.md"
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


@pytest.fixture
def tasks(settings: Any) -> ModuleType:
    """The test tasks, imported while TASKS names the durable backend (their class is ours)."""
    settings.TASKS = TASKS_FOR_TESTS
    import tests.django_tasks_for_tests as module

    return module


@pytest.fixture
def enqueued() -> Iterator[list[TaskResult[Any, Any]]]:
    """Every task_enqueued signal this process sends during the test."""
    sent: list[TaskResult[Any, Any]] = []

    def receive(sender: Any, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        sent.append(task_result)

    task_enqueued.connect(receive, weak=False)
    yield sent
    task_enqueued.disconnect(receive)


def start_worker(
    harness: Harness, name: str, *, queues: str = "jobs", pool: str = "prefork"
) -> Proc:
    """A real worker with TASKS on our backend; its calls go to the harness's calls file."""
    env = {
        "DJANGO_SETTINGS_MODULE": WORKER_SETTINGS,
        CALLS_FILE_ENV: str(harness.workdir / "calls.log"),
    }
    return harness.start_worker(name, queues=queues, pool=pool, env=env)


def calls(harness: Harness) -> list[str]:
    path = harness.workdir / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


def finished(result: TaskResult[Any, Any], *, timeout: float = 60) -> TaskResult[Any, Any]:
    """Refresh until the result is SUCCESSFUL or FAILED (Django's `is_finished`)."""

    def done() -> bool:
        result.refresh()
        return result.is_finished

    wait_until(done, timeout=timeout, interval=0.1, what=f"task result {result.id} to finish")
    return result


# -- enqueue: in and out of a transaction --------------------------------------------------


def test_enqueue_outside_a_transaction__commits_itself_and_a_worker_runs_it(
    tasks: ModuleType, harness: Harness, enqueued: list[TaskResult[Any, Any]]
) -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == ([2, 3], {}, "default")
    assert result.enqueued_at is not None and result.started_at is None
    assert [r.id for r in enqueued] == [result.id]  # sent once, after the commit
    job = Job.objects.get(pk=result.id)
    assert job.kind == "task:tests.django_tasks_for_tests.add"
    assert OutboxEntry.objects.filter(job_id=job.pk).count() == 1
    # Django tasks have no user: the jobs belong to an inactive user that cannot log in.
    assert (job.owner.username, job.owner.is_active, job.owner.has_usable_password()) == (
        "django-tasks",
        False,
        False,
    )

    worker = start_worker(harness, "w-tasks")
    done = finished(tasks.add.get_result(result.id))
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.errors == [] and done.attempts == 1
    assert done.worker_ids[0].startswith("w-tasks:")
    enqueued_at, started_at = done.enqueued_at, done.started_at
    attempted_at, finished_at = done.last_attempted_at, done.finished_at
    assert enqueued_at and started_at and attempted_at and finished_at
    assert enqueued_at <= started_at <= attempted_at <= finished_at
    # task_started and task_finished are sent in the worker (Django logs both).
    log = worker.log()
    assert f"Task id={result.id} path=tests.django_tasks_for_tests.add state=RUNNING" in log
    assert f"Task id={result.id} path=tests.django_tasks_for_tests.add state=SUCCESSFUL" in log


def test_enqueue_inside_a_transaction__the_job_commits_with_the_callers_rows(
    tasks: ModuleType, harness: Harness
) -> None:
    start_worker(harness, "w-tasks")
    with transaction.atomic():
        get_user_model().objects.create_user(username="carol")
        result = tasks.user_exists.enqueue("carol")
        assert Job.objects.filter(pk=result.id).exists()  # in our transaction, not yet theirs
    assert finished(result).return_value is True  # the worker saw carol: one commit


def test_enqueue_rolled_back__leaves_nothing_and_nothing_runs(
    tasks: ModuleType, harness: Harness, enqueued: list[TaskResult[Any, Any]]
) -> None:
    start_worker(harness, "w-tasks")

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic():
        rolled_back = tasks.add.enqueue(40, 2)
        raise Abandon

    assert not Job.objects.exists() and not OutboxEntry.objects.exists()
    assert enqueued == []
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(rolled_back.id)
    # The worker is up and runs the next task; the rolled-back one never reaches it.
    committed = tasks.add.enqueue(1, 1)
    assert finished(committed).return_value == 2
    assert calls(harness) == ["add 1 1"]
    assert [r.id for r in enqueued] == [committed.id]


# -- statuses, return values, errors ---------------------------------------------------------


def test_each_status__ready_then_running_then_successful(
    tasks: ModuleType, harness: Harness
) -> None:
    release = harness.workdir / "release"
    result = tasks.wait_for.enqueue(str(release))
    result.refresh()
    assert result.status == TaskResultStatus.READY  # accepted; no worker yet
    with pytest.raises(ValueError, match="not finished yet"):
        _ = result.return_value

    start_worker(harness, "w-tasks")

    def running() -> bool:
        result.refresh()
        return result.status == TaskResultStatus.RUNNING

    wait_until(running, timeout=60, interval=0.1, what="the task to be RUNNING")
    assert result.started_at is not None and result.finished_at is None
    assert result.attempts == 1 and not result.is_finished
    release.write_text("go")
    assert finished(result).status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "released"


def test_return_values_and_errors__json_round_trip_class_path_and_traceback(
    tasks: ModuleType, harness: Harness
) -> None:
    echoed = tasks.echo.enqueue({"tuple": (1, 2), "nested": [{"a": None}]})
    failing = tasks.explode.enqueue("order 84 does not exist")
    not_json = tasks.not_json.enqueue()
    start_worker(harness, "w-tasks")

    assert finished(echoed).return_value == {"tuple": [1, 2], "nested": [{"a": None}]}

    assert finished(failing).status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = failing.return_value
    (error,) = failing.errors  # max_attempts=1: one attempt, one error
    assert error.exception_class is ValueError
    assert "raise ValueError(message)" in error.traceback
    assert error.traceback.rstrip().endswith("ValueError: order 84 does not exist")
    assert failing.attempts == 1 and failing.finished_at is not None

    # A return value JSON cannot carry fails at once (no retry can fix it), as a TypeError.
    assert finished(not_json).status == TaskResultStatus.FAILED
    (error,) = not_json.errors
    assert error.exception_class is ReturnValueNotJSON
    assert issubclass(error.exception_class, TypeError)
    assert "datetime is not JSON serializable" in error.traceback


def test_arguments__json_round_trip_at_enqueue__djangos_type_error(tasks: ModuleType) -> None:
    with pytest.raises(TypeError, match="Object of type datetime is not JSON serializable"):
        tasks.echo.enqueue(datetime.now(UTC))
    assert not Job.objects.exists()
    result = tasks.echo.enqueue((1, 2), key=("a", "b"))
    assert (result.args, result.kwargs) == ([[1, 2]], {"key": ["a", "b"]})
    assert Job.objects.get(pk=result.id).input == {"args": [[1, 2]], "kwargs": {"key": ["a", "b"]}}


def test_transient_error_then_success__attempts_through_the_context(
    tasks: ModuleType, harness: Harness
) -> None:
    harness.start_relay()  # the retry's message is due later: the relay publishes it
    start_worker(harness, "w-tasks")
    result = finished(tasks.flaky.enqueue(succeed_on=2))

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {
        "attempt": 2,
        "result_id": result.id,
        "status": "RUNNING",  # the context's result, as the task saw it
        "workers": 2,
    }
    assert result.attempts == 2 and len(set(result.worker_ids)) == 2
    (error,) = result.errors
    assert error.exception_class is TransientError
    assert "attempt 1: the provider is down" in error.traceback
    assert calls(harness) == ["flaky attempt 1", "flaky attempt 2"]


def test_quarantined_after_its_budget__failed_and_seen_by_ops_admin_metrics_reconcile(
    tasks: ModuleType, harness: Harness, django_user_model: Any
) -> None:
    harness.start_relay()
    start_worker(harness, "w-tasks")
    result = finished(tasks.always_down.enqueue())

    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 2  # @task(max_attempts=2)
    assert [e.exception_class for e in result.errors] == [TransientError, TransientError]
    job = Job.objects.get(pk=result.id)
    assert job.state == "quarantined"  # FAILED to Django; waiting for an operator here
    record = QuarantineRecord.objects.get(job_id=job.pk)
    assert (record.kind, record.responsible, record.attempts) == (
        "task:tests.django_tasks_for_tests.always_down",
        "billing-team",
        2,
    )
    assert record.reason.startswith("attempt budget exhausted after 2: TransientError")
    assert result.finished_at is not None

    # Operators see it like any other kind.
    staff = django_user_model.objects.create_superuser(username="ops", password="pw")
    client = Client()
    client.force_login(staff)
    ops = client.get("/ops/").content.decode()
    assert record.kind in ops and "billing-team" in ops
    changelist = client.get("/admin/jobs/job/")
    assert record.kind in changelist.content.decode()
    metrics = client.get("/metrics").content.decode()
    assert re.search(r"^jobs_quarantined 1(\.0)?$", metrics, re.MULTILINE), metrics
    report = reconcile_run()
    summary = {k.kind: k for k in report.kinds or ()}[record.kind]
    assert (summary.accepted, summary.quarantined) == (1, 1)
    assert report.open_quarantine == 1


def test_run_after__the_task_waits_for_its_time(tasks: ModuleType, harness: Harness) -> None:
    harness.start_relay()
    start_worker(harness, "w-tasks")
    run_after = datetime.now(UTC) + timedelta(seconds=3)
    result = tasks.add.using(run_after=run_after).enqueue(4, 4)
    assert result.task.run_after == run_after
    entry = OutboxEntry.objects.get(job_id=result.id)
    assert entry.available_at == run_after and entry.reserved_until is None  # no fast path

    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert finished(result).return_value == 8
    assert result.started_at is not None and result.started_at >= run_after
    assert tasks.add.get_result(result.id).task.run_after == run_after


def test_aenqueue_and_aget_result__async_callers_and_an_async_task(
    tasks: ModuleType, harness: Harness
) -> None:
    start_worker(harness, "w-tasks")

    async def enqueue_both() -> tuple[TaskResult[Any, Any], TaskResult[Any, Any]]:
        return await tasks.add.aenqueue(20, 22), await tasks.async_add.aenqueue(a=2, b=3)

    sync_result, async_result = async_to_sync(enqueue_both)()

    async def read(result: TaskResult[Any, Any]) -> TaskResult[Any, Any]:
        fetched = await result.task.aget_result(result.id)
        await fetched.arefresh()
        return fetched

    def both_done() -> bool:
        return all(async_to_sync(read)(r).is_finished for r in (sync_result, async_result))

    wait_until(both_done, timeout=60, interval=0.1, what="both tasks to finish")
    assert async_to_sync(read)(sync_result).return_value == 42
    assert async_to_sync(read)(async_result).return_value == 5  # `async def` task


def test_queues_map_to_celery_queues__the_emails_queue_runs_on_its_own_worker(
    tasks: ModuleType, harness: Harness
) -> None:
    result = tasks.add.using(queue_name="emails").enqueue(1, 2)
    job = Job.objects.get(pk=result.id)
    assert job.kind == "task:tests.django_tasks_for_tests.add@emails"
    assert OutboxEntry.objects.get(job_id=job.pk).queue == "jobs-emails"  # OPTIONS mapping
    start_worker(harness, "w-emails", queues="jobs-emails")
    assert finished(result).return_value == 3
    assert result.task.queue_name == "emails"


# -- crashes ---------------------------------------------------------------------------------


def test_worker_sigkilled_mid_task__successful_once_and_its_ledger_effect_applied_once(
    tasks: ModuleType, harness: Harness
) -> None:
    harness.start_relay()
    hold = harness.workdir / "charged"
    # Solo pool: the main process runs the task, so SIGKILL takes the whole worker down.
    first = start_worker(harness, "w1", pool="solo")
    result = tasks.charge_once.enqueue(order=84, hold_path=str(hold))
    wait_until(hold.exists, timeout=60, what="attempt 1 to charge and hang")

    first.signal(signal.SIGKILL)
    wait_until(lambda: not first.alive(), timeout=30, what="worker 1 to die")
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING  # its lease has not expired yet
    start_worker(harness, "w2")

    def taken_over() -> bool:
        jobs_reap()  # the maintenance worker's reaper, run here
        return Job.objects.get(pk=result.id).generation > 1

    wait_until(taken_over, timeout=90, interval=0.5, what="the expired lease to be reaped")
    done = finished(result, timeout=90)

    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.attempts == 2
    assert done.worker_ids[0].startswith("w1:") and done.worker_ids[1].startswith("w2:")
    assert [e.exception_class for e in done.errors] == [WorkerLost]
    charge = done.return_value["charge"]
    assert done.return_value["attempt"] == 2 and charge["charge_id"] == "ch-84"
    # One external charge: the ledger entry applied by attempt 1 was reused by attempt 2.
    assert calls(harness) == [f"charge 84 {charge['key']}"]
    (entry,) = EffectLedgerEntry.objects.filter(job_id=result.id)
    assert (entry.name, entry.state, entry.calls, entry.idempotency_key) == (
        "charge",
        "applied",
        1,
        charge["key"],
    )
    assert JobEvent.objects.filter(job_id=result.id, to_state="succeeded").count() == 1
    assert counter_value(EFFECTS_REUSED) >= 1 and counter_value(DUPLICATE_EFFECTS) == 0


# -- what the backend refuses, and what it does not find -------------------------------------


def plain(value: Any) -> Any:
    return value


def test_validate_task__refuses_what_we_cannot_run_with_djangos_invalid_task(
    tasks: ModuleType, settings: Any
) -> None:
    backend = task_backends["default"]
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)  # Django's range: -100..100
    with pytest.raises(InvalidTask, match="not valid for backend"):
        tasks.add.using(queue_name="reports")  # not in QUEUES
    with pytest.raises(InvalidTask, match="max_attempts must be a whole number >= 1"):
        task(max_attempts=0)(plain)  # type: ignore[call-overload]  # django-stubs: no **kwargs
    with pytest.raises(InvalidTask, match="input_schema"):
        task(input_schema=["not", "a", "schema"])(plain)  # type: ignore[call-overload]
    # A task workers could not import by its path is refused before anything is written.
    with pytest.raises(InvalidTask, match="does not import as a Task"):
        task(plain).enqueue(1)
    assert not Job.objects.exists()
    # The kind carries the queue: it must fit in a kind's 100 characters.
    long_queue = "x" * 80
    settings.TASKS = {"default": {**TASKS_FOR_TESTS["default"], "QUEUES": [long_queue]}}
    with pytest.raises(InvalidTask, match="longer than 100 characters"):
        task(queue_name=long_queue)(plain)


def test_get_result__foreign_ids_do_not_exist_and_another_tasks_id_mismatches(
    tasks: ModuleType, user: Any
) -> None:
    for result_id in (str(uuid.uuid4()), "not-an-id"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(result_id)
    plain_job = jobs.submit(kind="noop", input={}, owner=user)  # a job, not a task result
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(plain_job.pk))
    echoed = tasks.echo.enqueue(1)
    with pytest.raises(TaskResultMismatch):
        tasks.add.get_result(echoed.id)


def test_business_key__a_second_enqueue_returns_the_first_job(tasks: ModuleType) -> None:
    first = tasks.report.enqueue(7)
    again = tasks.report.enqueue(7)
    other = tasks.report.enqueue(8)
    assert again.id == first.id and other.id != first.id
    assert Job.objects.get(pk=first.id).business_key == "report:7"
    assert Job.objects.count() == 2


def test_input_schema__refused_at_enqueue_and_nothing_written(tasks: ModuleType) -> None:
    with pytest.raises(ValidationFailed, match="kwargs/name"):
        tasks.greet.enqueue(name="")
    assert not Job.objects.exists()
    assert tasks.greet.enqueue(name="ann").status == TaskResultStatus.READY


def test_cancelled_job__reads_failed_with_job_cancelled(tasks: ModuleType) -> None:
    result = tasks.add.using(run_after=datetime.now(UTC) + timedelta(hours=1)).enqueue(1, 2)
    job_cancel(job_id=uuid.UUID(result.id), actor="operator")
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [JobCancelled]


def test_http_api__never_submits_a_task_kind_and_the_task_owner_cannot_log_in(
    tasks: ModuleType, user: Any
) -> None:
    """Queue access is not a grant: a task runs only when Python code enqueued it."""
    response = submit(
        token_client(user), {"kind": "task:tests.django_tasks_for_tests.add", "input": {}}
    )
    assert response.status_code == 400
    tasks.add.enqueue(1, 2)  # creates the owner
    owner = get_user_model().objects.get(username="django-tasks")
    assert token_client(owner).get("/api/jobs/").status_code == 401


def test_system_check__bad_options_and_queue_names(settings: Any) -> None:
    settings.TASKS = {
        "default": {
            "BACKEND": "jobs.tasks_backend.DurableJobsBackend",
            "QUEUES": ["default", "bad queue"],
            "OPTIONS": {"max_attempts": 0, "colour": "blue"},
        }
    }
    backend = task_backends["default"]
    found = {(m.id, m.msg) for m in backend.check()}
    assert ("jobs.E101", "TASKS['default']['OPTIONS']: unknown option 'colour'.") in found
    assert any(i == "jobs.E101" and "'max_attempts' must be" in m for i, m in found)
    assert any(i == "jobs.E102" and "'bad queue'" in m for i, m in found)
    with pytest.raises(InvalidTaskBackend):
        backend.enqueue(task_backends["default"].task_class(func=plain), [1], {})


# -- the README's example, as written ----------------------------------------------------


def readme_task_blocks() -> list[str]:
    """The python blocks of README's "Use it as Django's task backend" section."""
    text = README.read_text()
    start = text.index("## Use it as Django's task backend")
    section = text[start : text.index("\n## ", start + 1)]
    blocks = [m.group("body") for m in FENCE.finditer(section) if m.group("info") == "python"]
    assert len(blocks) == 3, "settings, myapp/tasks.py, usage"
    return blocks


@pytest.fixture
def readme_app(tmp_path: Path, settings: Any) -> Iterator[tuple[dict[str, Any], Path]]:
    """README's settings block as TASKS, its tasks block as the module myapp.tasks."""
    settings_block, tasks_block, _ = readme_task_blocks()
    namespace: dict[str, Any] = {}
    exec(compile(settings_block, "README.md (settings)", "exec"), namespace)
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(tasks_block)
    settings.TASKS = namespace["TASKS"]
    sys.path.insert(0, str(tmp_path))
    yield namespace["TASKS"], tmp_path
    sys.path.remove(str(tmp_path))
    for name in ("myapp.tasks", "myapp"):
        sys.modules.pop(name, None)
    registry.unregister("task:myapp.tasks.send_receipt@emails")


def test_readme_example__runs_as_written_on_a_real_worker(
    readme_app: tuple[dict[str, Any], Path], harness: Harness
) -> None:
    tasks_setting, app_dir = readme_app
    harness.start_provider()
    harness.start_worker(
        "w-readme",
        queues="jobs,emails",
        DJANGO_SETTINGS_MODULE=WORKER_SETTINGS,
        JOBS_TEST_TASKS=json.dumps(tasks_setting),
        PYTHONPATH=f"{ROOT}:{app_dir}",
    )
    *_, usage_block = readme_task_blocks()
    namespace: dict[str, Any] = {}
    exec(compile(usage_block, "README.md (usage)", "exec"), namespace)

    result = finished(namespace["result"])
    assert result.status == TaskResultStatus.SUCCESSFUL
    value = result.return_value
    assert (
        value is not None
        and value["document"].endswith("/v1/receipt.txt")
        and value["attempt"] == 1
    )
    (entry,) = EffectLedgerEntry.objects.filter(job_id=result.id, name="receipt_email")
    assert entry.state == "applied" and entry.outcome is not None
    assert value["notice_id"] == entry.outcome["notice_id"]
    assert harness.provider_stats()["requests_by_key"] == {entry.idempotency_key: 1}
    assert Job.objects.get(pk=result.id).kind == "task:myapp.tasks.send_receipt@emails"


@pytest.mark.django_db
def test_enqueue__the_tasks_priority_is_the_jobs(tasks: ModuleType) -> None:
    urgent = tasks.add.using(priority=10).enqueue(1, 2)
    plain = tasks.add.enqueue(3, 4)

    stored = dict(Job.objects.values_list("pk", "priority"))
    assert (stored[uuid.UUID(urgent.id)], stored[uuid.UUID(plain.id)]) == (10, 0)
