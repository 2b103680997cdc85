"""A handler's SystemExit (or another BaseException of its own) is the job's failure.

Celery's own pool lets a task's `SystemExit` end the process that ran it; here that cost a
pool process per attempt and left the job to the reaper once its lease expired. Now a
handler's `sys.exit()` is classified like an unknown error (retried under the kind's
policy, quarantined at the end of its budget), recorded with its class and traceback, and
the process serves the next job. What stops the worker itself still propagates: Celery's
WorkerShutdown / WorkerTerminate, KeyboardInterrupt, GeneratorExit, and a prefork child's
SIGTERM (billiard raises SystemExit from its signal handler).

Real `celery worker` processes run tests/kinds_exits.py (60 s leases, so a job that ends
within seconds was not recovered after a lease expiry) and, through Django's Tasks API,
tests/django_tasks_for_tests.py. The lease-owner token of each claim names the process
that ran the attempt (`<worker>:<nonce>:<pid>`).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import billiard.common
import pytest
import redis
from django.tasks import TaskResultStatus

import jobs
import tests.kinds_exits  # noqa: F401  (registers the kinds in this process too)
from jobs import batch
from jobs.identity import lease_owner_worker
from jobs.models import Job, JobEvent, QuarantineRecord
from jobs.outcomes import Outcome
from outbox.models import OutboxEntry
from tests.harness import Harness, Proc, queue_envelopes, wait_until
from tests.kinds_exits import STOPS
from tests.settings_tasks import TASKS_FOR_TESTS

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = "tests.kinds_exits"
# Well inside the 60 s lease: an outcome by then came from the worker, not from the reaper.
PROMPTLY = 20.0
FAILED_EVENTS = ("retry_wait", "quarantined")


def start_worker(harness: Harness, name: str, **env: str) -> Proc:
    return harness.start_worker(name, JOBS_HANDLER_MODULES=KINDS, env=env)


def state_of(job_id: Any) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job_id)


def wait_state(job_id: Any, *states: str, timeout: float = PROMPTLY) -> Job:
    wait_until(
        lambda: state_of(job_id) in states, timeout=timeout, interval=0.1, what=f"{job_id} {states}"
    )
    return Job.objects.get(pk=job_id)


def events(job_id: Any) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job_id=job_id).order_by("id"))


def claim_pids(job_id: Any) -> list[int | None]:
    """The pid of the process behind each claim of the job, in order."""
    return [lease_owner_worker(e.worker)[1] for e in events(job_id) if e.to_state == "leased"]


def assert_no_lease_expired(job_ids: list[Any]) -> None:
    for event in JobEvent.objects.filter(job_id__in=job_ids):
        assert (event.details or {}).get("category") != "lease_expired", event.reason
        assert "expired" not in event.reason, event.reason


def assert_failed_with_system_exit(event: JobEvent, code: int) -> None:
    """A failure event the runtime wrote: SystemExit, its traceback, classified unknown."""
    details = event.details or {}
    assert details["exception_class"] == "builtins.SystemExit", details
    assert details["category"] == "unknown"
    assert "sys.exit(" in details["traceback"]
    assert details["traceback"].rstrip().endswith(f"SystemExit: {code}")


# -- @handler through a real worker ------------------------------------------------------------


def test_sys_exit_in_a_handler__retried_then_quarantined_as_systemexit_and_the_process_serves_on(
    harness: Harness, user: Any
) -> None:
    harness.start_relay(JOBS_HANDLER_MODULES=KINDS)  # the retry is an outbox row due later
    worker = start_worker(harness, "w-exit")
    child = worker.pool_child()
    started = time.monotonic()
    job = jobs.submit(kind="exits.sys_exit", input={"code": 3}, owner=user)

    done = wait_state(job.pk, "quarantined")

    assert time.monotonic() - started < PROMPTLY
    trail = events(job.pk)
    failures = [e for e in trail if e.to_state in FAILED_EVENTS]
    assert [(e.to_state, e.attempt) for e in failures] == [("retry_wait", 1), ("quarantined", 2)]
    for failure in failures:
        assert_failed_with_system_exit(failure, 3)
    assert (done.attempt, done.error_category, done.error_message) == (
        2,
        "unknown",
        "SystemExit: 3",
    )
    record = QuarantineRecord.objects.get(job_id=job.pk)
    assert (record.category, record.attempts) == ("unknown", 2)
    assert record.reason == "attempt budget exhausted after 2: SystemExit"
    assert_no_lease_expired([job.pk])
    # Both attempts ran in the pool process there was before; it serves the next job too.
    assert claim_pids(job.pk) == [child, child]
    after = jobs.submit(kind="exits.ok", input={}, owner=user)
    assert wait_state(after.pk, "succeeded").result == {"pid": child}
    assert worker.alive() and worker.pool_child() == child
    assert "WorkerLostError" not in worker.log()


def test_a_base_exception_of_the_handlers_own__quarantined_with_its_class(user: Any) -> None:
    job = jobs.submit(kind="exits.abort", input={}, owner=user)

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    (failure,) = [e for e in events(job.pk) if e.to_state in FAILED_EVENTS]
    assert failure.details["exception_class"] == "tests.kinds_exits.Abort"
    assert failure.details["traceback"].rstrip().endswith("Abort: the handler gave up")
    assert Job.objects.get(pk=job.pk).error_message == "Abort: the handler gave up"


@pytest.mark.parametrize("name", sorted(STOPS))
def test_the_workers_own_shutdown_in_a_handler__propagates_and_writes_no_failure(
    user: Any, name: str
) -> None:
    job = jobs.submit(kind="exits.stop", input={"raise": name}, owner=user)

    with pytest.raises(STOPS[name]):
        jobs.execute(job.pk)

    # Left as a killed worker leaves it: leased, for redelivery or the reaper.
    assert state_of(job.pk) == "leased"
    assert not [e for e in events(job.pk) if e.to_state in FAILED_EVENTS]


def test_system_exit_after_the_pool_processs_terminate_handler__propagates_and_writes_no_failure(
    user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """billiard's SIGTERM handler in a prefork child sets its flag, then raises SystemExit."""
    monkeypatch.setattr(billiard.common, "_should_have_exited", [True])
    job = jobs.submit(kind="exits.sys_exit", input={"code": 3}, owner=user)

    with pytest.raises(SystemExit):
        jobs.execute(job.pk)

    assert state_of(job.pk) == "leased"
    assert not [e for e in events(job.pk) if e.to_state in FAILED_EVENTS]


def test_sigterm_to_the_pool_process_mid_handler__the_job_is_left_leased_not_failed(
    harness: Harness, user: Any, tmp_path: Path
) -> None:
    worker = start_worker(harness, "w-term")
    child = worker.pool_child()
    started = tmp_path / "started"
    job = jobs.submit(kind="exits.wait", input={"started": str(started), "seconds": 30}, owner=user)
    wait_until(started.exists, timeout=30, what="the handler to start")

    os.kill(child, signal.SIGTERM)

    wait_until(
        lambda: worker.children() and child not in worker.children(),
        timeout=30,
        what="the pool to replace its terminated process",
    )
    # Not the handler's failure: the job waits under its lease for the reaper, as after a kill.
    assert state_of(job.pk) == "leased"
    assert not [e for e in events(job.pk) if e.to_state in FAILED_EVENTS]


def test_sys_exit_in_a_local_effect__the_completion_rolls_back_and_the_job_fails(
    user: Any,
) -> None:
    job = jobs.submit(kind="exits.local_effect_exit", input={}, owner=user)

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    done = Job.objects.get(pk=job.pk)
    assert (done.state, done.result) == ("quarantined", None)
    (failure,) = [e for e in events(job.pk) if e.to_state in FAILED_EVENTS]
    assert_failed_with_system_exit(failure, 4)


# -- django.tasks through a real worker -------------------------------------------------------


@pytest.fixture
def tasks(settings: Any) -> ModuleType:
    """The test tasks, imported while TASKS names the durable backend."""
    settings.TASKS = TASKS_FOR_TESTS
    import tests.django_tasks_for_tests as module

    return module


def test_sys_exit_in_a_django_task__failed_with_systemexit_and_the_process_serves_on(
    tasks: ModuleType, harness: Harness
) -> None:
    worker = harness.start_worker("w-tasks", DJANGO_SETTINGS_MODULE="tests.settings_tasks")
    child = worker.pool_child()
    started = time.monotonic()
    result = tasks.script_exit.enqueue(3)

    def finished() -> bool:
        result.refresh()
        return bool(result.is_finished)

    wait_until(finished, timeout=PROMPTLY, interval=0.1, what="the task to finish")

    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "builtins.SystemExit"
    assert error.exception_class is SystemExit
    assert "sys.exit(code)" in error.traceback
    assert error.traceback.rstrip().endswith("SystemExit: 3")
    assert result.attempts == 1 and result.finished_at is not None
    assert time.monotonic() - started < PROMPTLY
    assert_no_lease_expired([result.id])
    (owner,) = result.worker_ids
    assert lease_owner_worker(owner)[1] == child
    after = tasks.add.enqueue(1, 2)
    wait_until(lambda: state_of(after.id) == "succeeded", timeout=PROMPTLY, what="the next task")
    assert tasks.add.get_result(after.id).return_value == 3
    assert claim_pids(after.id) == [child]
    assert worker.pool_child() == child


# -- the batch path: one message, several jobs ------------------------------------------------


def batch_messages(harness: Harness) -> list[list[str]]:
    """The job ids of each message waiting in the private Redis queue `jobs`."""
    client = redis.Redis.from_url(harness.broker_url)
    try:
        raw = queue_envelopes(client, "jobs")
    finally:
        client.close()
    bodies = [json.loads(base64.b64decode(json.loads(item)["body"]))[1] for item in raw]
    return [[i["job_id"] for i in body.get("items", [body])] for body in bodies]


def test_sys_exit_in_a_batch_message__only_that_job_fails_its_siblings_commit_the_process_goes_on(
    harness: Harness, user: Any
) -> None:
    kinds = ["exits.ok", "exits.ok", "exits.sys_exit", "exits.ok"]
    batch_jobs = jobs.submit_many(
        [{"kind": kind, "input": {"code": 5}, "owner": user} for kind in kinds]
    )
    ids = [str(job.pk) for job in batch_jobs]
    assert batch_messages(harness) == [ids]  # one jobs.execute_many message carries all four
    exiting, siblings = ids[2], ids[:2] + ids[3:]
    harness.start_relay(JOBS_HANDLER_MODULES=KINDS)
    worker = start_worker(harness, "w-batch")
    child = worker.pool_child()
    started = time.monotonic()

    for job_id in siblings:
        assert wait_state(job_id, "succeeded").result == {"pid": child}
    done = wait_state(exiting, "quarantined")

    assert time.monotonic() - started < PROMPTLY
    for job_id in siblings:
        claims = [e.reason for e in events(job_id) if e.to_state == "leased"]
        assert claims == ["claimed in a batch"]
        assert Job.objects.get(pk=job_id).attempt == 1  # charged once, by the group commit
    failures = [e for e in events(exiting) if e.to_state in FAILED_EVENTS]
    assert [(e.to_state, e.attempt) for e in failures] == [("retry_wait", 1), ("quarantined", 2)]
    for failure in failures:
        assert_failed_with_system_exit(failure, 5)
    assert events(exiting)[1].reason == "claimed in a batch"  # its first run was in the batch
    assert done.attempt == 2
    assert_no_lease_expired(ids)
    assert claim_pids(exiting) == [child, child]
    # Acked once every outcome committed; the process that ran the batch is still the pool's.
    wait_until(harness.broker_idle, timeout=PROMPTLY, what="every message acked")
    # A fast-path publish is marked by its process's mark thread, in batches (outbox.marks).
    wait_until(
        lambda: not OutboxEntry.objects.filter(published_at__isnull=True).exists(),
        timeout=PROMPTLY,
        what="every outbox row marked published",
    )
    assert worker.alive() and worker.pool_child() == child
    assert "WorkerLostError" not in worker.log()


def test_a_local_effect_exit_in_a_batch__fails_that_job_alone(user: Any, settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False  # the message is built here from the outbox rows
    exiting = jobs.submit(kind="exits.local_effect_exit", input={}, owner=user)
    sibling = jobs.submit(kind="exits.ok", input={}, owner=user)
    items = [
        dict(OutboxEntry.objects.filter(job_id=job.pk).get().kwargs) for job in (exiting, sibling)
    ]

    reports = {r.job_id: r.outcome for r in batch.execute_many(items)}

    assert reports == {str(exiting.pk): Outcome.QUARANTINED, str(sibling.pk): Outcome.SUCCEEDED}
    (failure,) = [e for e in events(exiting.pk) if e.to_state in FAILED_EVENTS]
    assert_failed_with_system_exit(failure, 4)
    assert Job.objects.get(pk=sibling.pk).state == "succeeded"
