"""Bounded failure with real worker processes: retries, quarantine, poison jobs, paused workers."""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

import jobs
from jobs.counters import STALE_WRITES_REJECTED, counter_value
from jobs.models import EffectLedgerEntry, Job, JobEvent, QuarantineRecord
from jobs.reaper import jobs_reap
from jobs.retry import backoff_ceiling
from outbox.relay import outbox_relay_until_empty
from tests.harness import Harness, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

TERMINAL = ("succeeded", "cancelled", "failed")


@pytest.fixture
def bounded_kinds() -> None:
    """The test-only kinds, registered in this process too (workers load them from env)."""
    import tests.kinds_bounded  # noqa: F401


def state_of(job: Job) -> str:
    return Job.objects.values_list("state", flat=True).get(pk=job.pk)


def trail(job: Job) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job=job).order_by("at", "id"))


def wait_state(job: Job, state: str, *, timeout: float = 90, reap: bool = False) -> Job:
    """Wait for `state`; with `reap`, run the reaper on each poll as beat would."""

    def reached() -> bool:
        if reap:
            jobs_reap()
        return state_of(job) == state

    wait_until(reached, timeout=timeout, interval=0.3, what=f"job {job.pk} to be {state}")
    job.refresh_from_db()
    return job


# -- transient, permanent, elapsed ------------------------------------------------------------


def test_transient_twice_then_success__three_attempts_jittered_one_effect(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_relay()  # retries are outbox rows due in the future
    harness.start_worker("w1")
    job = jobs.submit(kind="drill.flaky", input={"fail_times": 2, "notify": True}, owner=user)
    job = wait_state(job, "succeeded", timeout=120)

    assert job.attempt == 3 and job.result == {"attempt": 3}
    events = trail(job)
    waits = [e for e in events if e.to_state == "retry_wait"]
    claims = [e for e in events if e.to_state == "leased"]
    assert [e.attempt for e in waits] == [1, 2]
    assert [e.attempt for e in claims] == [1, 2, 3]
    for wait in waits:
        # drill.flaky: base 0.2s, cap 2s -> full jitter in [0, min(2, 0.2 * 2**(attempt-1))].
        ceiling = backoff_ceiling(wait.attempt, base=0.2, cap=2.0)
        assert 0.0 <= wait.details["delay_seconds"] <= ceiling + 0.001
        assert wait.details["category"] == "transient"
        # next_attempt_at honoured: the next claim is not before it (claim checks the DB clock).
        due = datetime.fromisoformat(wait.details["next_attempt_at"])
        next_claim = claims[wait.attempt]
        assert next_claim.at >= due, (next_claim.at, due)
    assert harness.provider_stats()["notices"] == 1
    ledger = EffectLedgerEntry.objects.get(job=job)
    assert (ledger.name, ledger.state, ledger.calls) == ("notice", "applied", 1)
    assert not QuarantineRecord.objects.filter(job=job).exists()


def test_malformed_payload_quarantined__exactly_one_attempt_never_retried(
    harness: Harness, user: Any
) -> None:
    harness.start_relay()
    harness.start_worker("w1")
    job = jobs.submit(kind="drill.malformed", input={"document_id": "x"}, owner=user)
    job = wait_state(job, "quarantined", timeout=60)

    record = QuarantineRecord.objects.get(job=job)
    assert (record.category, record.responsible, record.attempts) == ("permanent", "ingest-team", 1)
    assert record.status == "open"
    # Give every retry path its chance: reaper, relay, and a second delivery of the message.
    assert jobs_reap().expired == 0
    outbox_relay_until_empty(time_budget=2)
    assert jobs.execute(job.pk).outcome.value == "duplicate"
    job.refresh_from_db()
    assert job.state == "quarantined" and job.attempt == 1 and job.generation == 1
    events = trail(job)
    assert [e.to_state for e in events] == ["queued", "leased", "quarantined"]
    assert not any(e.to_state == "retry_wait" for e in events)


def test_elapsed_budget_stops_retries_at_deadline__attempts_left(
    harness: Harness, user: Any
) -> None:
    harness.start_relay()
    harness.start_worker("w1")
    job = jobs.submit(kind="drill.always_transient", input={}, owner=user)
    job = wait_state(job, "quarantined", timeout=90)

    record = QuarantineRecord.objects.get(job=job)
    assert record.reason == "elapsed budget exhausted: TransientError: still down"
    assert record.category == "transient"
    assert 1 <= job.attempt < 50  # attempts were left; time was not
    assert job.deadline is not None
    assert abs(job.deadline - job.created_at - timedelta(seconds=3)) < timedelta(seconds=1)
    for wait in (e for e in trail(job) if e.to_state == "retry_wait"):
        assert datetime.fromisoformat(wait.details["next_attempt_at"]) < job.deadline


# -- the poison job: os._exit every attempt, then the fix and a redrive -----------------------


def staff_client(django_user_model: Any) -> tuple[Client, Any]:
    staff = django_user_model.objects.create_user(username="olga", password="pw", is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="jobs",
            codename__in=["view_quarantinerecord", "redrive_quarantinerecord"],
        )
    )
    client = Client()
    client.force_login(staff)
    return client, staff


def test_poison_job_quarantined_after_budget_then_fixed_and_redriven__admin_and_command(
    harness: Harness, user: Any, django_user_model: Any
) -> None:
    harness.start_relay()
    worker = harness.start_worker("w1")
    first_child = worker.pool_child()
    via_admin = jobs.submit(kind="drill.crash", input={"n": 1}, owner=user)
    via_command = jobs.submit(kind="drill.crash", input={"n": 2}, owner=user)

    for job in (via_admin, via_command):
        job = wait_state(job, "quarantined", timeout=180, reap=True)
        record = QuarantineRecord.objects.get(job=job)
        assert "lease expired 3 times" in record.reason, record.reason
        assert (record.category, record.attempts, record.responsible) == (
            "lease_expired",
            3,
            "platform-team",
        )
        assert job.attempt == 3
        claims = [e for e in trail(job) if e.to_state == "leased"]
        assert len(claims) == 3
    # Every attempt killed the pool child; the celery main process respawned it.
    assert worker.alive()
    assert worker.pool_child() != first_child
    assert "WorkerLostError" in worker.log() or "exited with" in worker.log()

    # The fix ships: restart the worker with the setting toggled.
    worker.stop()
    harness.start_worker("w2", JOBS_DRILL_CRASH_FIXED="1")

    client, staff = staff_client(django_user_model)
    record = QuarantineRecord.objects.get(job=via_admin)
    response = client.post(
        reverse("admin:jobs_quarantinerecord_changelist"),
        {
            "action": "redrive_same_version",
            "_selected_action": [str(record.pk)],
            "note": "crash fixed in release 42",
            "index": "0",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    result = harness.manage(
        "jobs_redrive",
        "--id",
        str(via_command.pk),
        "--action",
        "redrive",
        "--note",
        "crash fixed in release 42",
        "--actor",
        "oncall-sam",
    )
    assert "-> redrive by oncall-sam" in result.stdout

    for job, actor in ((via_admin, staff.get_username()), (via_command, "oncall-sam")):
        job = wait_state(job, "succeeded", timeout=90, reap=True)
        assert job.result == {"fixed": True}
        assert job.attempt == 1  # a fresh attempt budget
        record = QuarantineRecord.objects.get(job=job)
        assert (record.status, record.resolved_by) == ("redriven", actor)
        audit = [e for e in trail(job) if e.from_state == "quarantined"]
        assert len(audit) == 1
        assert (audit[0].to_state, audit[0].actor) == ("queued", actor)
        assert audit[0].reason == "redriven: crash fixed in release 42"
        states = [e.to_state for e in trail(job)]
        assert states[-4:] == ["quarantined", "queued", "leased", "succeeded"]


def test_admin_redrive_refused__staff_without_permission(
    harness: Harness, user: Any, django_user_model: Any
) -> None:
    job = jobs.submit(kind="drill.malformed", input={"document_id": "x"}, owner=user)
    jobs.execute(job.pk)
    record = QuarantineRecord.objects.get(job=job)
    viewer = django_user_model.objects.create_user(username="vic", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_quarantinerecord"))
    client = Client()
    client.force_login(viewer)
    client.post(
        reverse("admin:jobs_quarantinerecord_changelist"),
        {"action": "redrive_same_version", "_selected_action": [str(record.pk)], "note": "n"},
    )
    record.refresh_from_db()
    assert record.status == "open"
    assert state_of(job) == "quarantined"


# -- a paused worker: the reaper and a second worker move on; late writes are fenced ----------


def test_paused_worker_late_writes_never_make_two_terminal_states__sigstop_past_lease(
    harness: Harness, user: Any, bounded_kinds: None
) -> None:
    env = {"JOBS_HANDLER_MODULES": "tests.kinds_bounded"}
    harness.start_relay(env=env)
    first = harness.start_worker("w1", env=env)
    job = jobs.submit(kind="bounded.slow", input={"seconds": 4}, owner=user)
    wait_until(
        lambda: JobEvent.objects.filter(
            job=job, to_state="leased", worker__startswith="w1"
        ).exists(),
        timeout=60,
        what="w1 to claim the job",
    )
    child = first.pool_child()
    os.kill(child, signal.SIGSTOP)
    try:
        # Lease is 3s; the paused child can no longer heartbeat. Reaper + second worker run.
        harness.start_worker("w2", env=env)
        job = wait_state(job, "succeeded", timeout=120, reap=True)
        assert job.result is not None and job.result["worker"] == "w2"
        stale_before = counter_value(STALE_WRITES_REJECTED)
    finally:
        os.kill(child, signal.SIGCONT)
    # The paused worker wakes up and tries to write: every write is fenced by generation.
    wait_until(
        lambda: counter_value(STALE_WRITES_REJECTED) > stale_before,
        timeout=60,
        what="the paused worker's late write to be rejected",
    )
    wait_until(lambda: "lease lost" in first.log(), timeout=60, what="w1 to report lease lost")

    job.refresh_from_db()
    assert job.state == "succeeded" and job.result["worker"] == "w2"
    events = trail(job)
    terminal = [e for e in events if e.to_state in TERMINAL]
    assert len(terminal) == 1 and terminal[0].worker.startswith("w2")
    claims = [e.generation for e in events if e.to_state == "leased"]
    assert claims == sorted(set(claims)) and len(claims) >= 2  # strictly increasing
    generations = [e.generation for e in events]
    assert generations == sorted(generations)
    reaped = [e for e in events if e.to_state == "retry_wait"]
    assert reaped and reaped[0].details["category"] == "lease_expired"
    assert (
        job.finished_at is not None and timezone.now() > job.finished_at
    )  # sanity: one finish, in the past
