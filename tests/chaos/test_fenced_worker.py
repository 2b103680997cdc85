"""The fenced worker under real crashes: seed 004's job 84 and its failure trace.

Real `celery worker` subprocesses run `test.report` (the real `report.generate` handler with a
short lease, tests/kinds_for_tests.py) against a real notification provider. Crashes are
failpoints (`exit` = os._exit(137)), SIGKILL and SIGSTOP/SIGCONT. Recovery after a dead owner
is the reaper (run here in the test process) plus a relay subprocess.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

import jobs
import tests.kinds_for_tests  # noqa: F401  (registers test.report in this process too)
from demo.procs import process_alive
from jobs.counters import (
    DUPLICATE_DELIVERIES,
    DUPLICATE_EFFECTS,
    EFFECTS_REUSED,
    STALE_WRITES_REJECTED,
    counter_value,
)
from jobs.effects import effect_idempotency_key
from jobs.models import EffectLedgerEntry, Job, JobEvent
from jobs.reaper import jobs_reap
from outbox.services import outbox_enqueue
from tests.harness import Harness, Proc, wait_until
from tests.kinds_for_tests import CALLS_FILE_ENV

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

NOTICE = "completion_notice"
JOB_84 = {"title": "Permit report 84", "rows": [["permit", 84], ["reviewer", 47]]}


def worker_env(harness: Harness, **extra: str) -> dict[str, str]:
    return {
        "JOBS_HANDLER_MODULES": "tests.kinds_for_tests",
        CALLS_FILE_ENV: str(harness.workdir / "handler-calls.log"),
        **extra,
    }


def handler_calls(harness: Harness) -> list[str]:
    """One line per handler invocation, from every worker process."""
    path = harness.workdir / "handler-calls.log"
    return path.read_text().splitlines() if path.exists() else []


def artifact_files(harness: Harness, job: Job) -> list[Path]:
    root = harness.media_root / "artifacts" / str(job.pk)
    return sorted(p for p in root.rglob("*") if p.is_file())


def notice_key(job: Job) -> str:
    return effect_idempotency_key(job_id=job.pk, input_version=job.input_version, name=NOTICE)


def job_now(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def reap_until_taken_over(job: Job, *, generation: int, timeout: float = 90) -> None:
    """Run the reaper until someone else owns (or finished) the job past `generation`."""

    def taken_over() -> bool:
        jobs_reap()
        return job_now(job).generation > generation

    wait_until(taken_over, timeout=timeout, interval=0.5, what="the expired lease to be taken over")


def assert_one_artifact_one_notice(harness: Harness, job: Job) -> None:
    """Invariant 4 for job 84: one artifact, one notice held, every request under the ledger.

    Requests per key may exceed one (a crash after the provider recorded the notice and before
    the ledger recorded it applied makes the next attempt resend under the same key: one
    logical send), but never the times the ledger began the effect.
    """
    files = artifact_files(harness, job)
    assert [f.name for f in files] == ["report.md"]
    assert files[0].read_bytes().startswith(b"# Permit report 84")
    key = notice_key(job)
    stats = harness.provider_stats()
    assert stats["notices_by_key"] == {key: 1}
    applied = EffectLedgerEntry.objects.filter(
        job=job, input_version=job.input_version, name=NOTICE, state="applied"
    )
    (entry,) = applied
    assert entry.idempotency_key == key
    assert list(stats["requests_by_key"]) == [key]
    assert 1 <= stats["requests_by_key"][key] <= entry.calls
    assert EffectLedgerEntry.objects.filter(job=job).count() == 1
    assert JobEvent.objects.filter(job=job, to_state="succeeded").count() == 1
    assert counter_value(DUPLICATE_EFFECTS) == 0


def assert_killed_around_the_notice__one_logical_send(harness: Harness, job: Job) -> None:
    """After a kill timed on the provider holding the notice: either window, one logical send.

    The kill lands after the provider recorded the notice, but either before the ledger
    recorded it applied (generation 2 begins it again and resends under the same key; the
    provider replays its notice) or after (generation 2 reuses the stored outcome).
    """
    assert_one_artifact_one_notice(harness, job)
    entry = EffectLedgerEntry.objects.get(job=job, name=NOTICE)
    requests = harness.provider_stats()["requests_by_key"][notice_key(job)]
    assert entry.outcome is not None
    if requests == 1:
        assert (entry.calls, entry.generation, entry.outcome["replayed"]) == (1, 1, False)
        assert counter_value(EFFECTS_REUSED) == 1
    else:
        assert (requests, entry.calls, entry.generation) == (2, 2, 2)
        assert entry.outcome["replayed"] is True
        assert counter_value(EFFECTS_REUSED) == 0


def test_job_84_worker_dies_after_artifact_and_notice__second_worker_finishes_without_repeats(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_relay()
    # Solo pool: the process that runs the handler is the worker; the failpoint kills it.
    first = harness.start_worker(
        "w1",
        pool="solo",
        env=worker_env(harness, JOBS_FAILPOINTS="worker.after_effect_before_complete=exit"),
    )
    job = jobs.submit(kind="test.report", input=JOB_84, owner=user)

    wait_until(lambda: not first.alive(), timeout=60, what="worker 1 to die at its failpoint")
    assert first.popen.returncode == 137
    died = job_now(job)
    assert (died.state, died.generation) == ("leased", 1)
    assert len(artifact_files(harness, job)) == 1
    assert harness.provider_stats()["requests_by_key"] == {notice_key(job): 1}

    harness.start_worker("w2", env=worker_env(harness))
    reap_until_taken_over(job, generation=1)
    wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")

    done = job_now(job)
    assert done.generation == 2
    assert done.result is not None and done.result["artifact"].endswith("report.md")
    assert_one_artifact_one_notice(harness, job)
    assert harness.provider_stats()["requests_by_key"] == {notice_key(job): 1}
    entry = EffectLedgerEntry.objects.get(job=job, name=NOTICE)
    assert (entry.calls, entry.generation) == (1, 1)  # applied once, by the first generation
    assert counter_value(EFFECTS_REUSED) == 1
    owners = list(
        JobEvent.objects.filter(job=job, to_state="leased")
        .order_by("generation")
        .values_list("worker", flat=True)
    )
    assert owners[0].startswith("w1:") and owners[1].startswith("w2:")
    assert len(handler_calls(harness)) == 2  # the handler re-ran; its effects did not


def test_job_84_builtin_report_generate__worker_dies_before_completion_second_finishes_once(
    harness: Harness, user: Any
) -> None:
    """The shipped kind itself, with its real 30 s lease: the slow version of the drill above."""
    harness.start_provider()
    harness.start_relay()
    first = harness.start_worker(
        "w1", pool="solo", JOBS_FAILPOINTS="worker.after_effect_before_complete=exit"
    )
    job = jobs.submit(kind="report.generate", input={**JOB_84, "reviewer": 47}, owner=user)
    wait_until(lambda: not first.alive(), timeout=60, what="worker 1 to die at its failpoint")
    assert first.popen.returncode == 137
    assert harness.provider_stats()["notices"] == 1

    harness.start_worker("w2")
    reap_until_taken_over(job, generation=1, timeout=120)
    wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")

    assert job_now(job).generation == 2
    assert_one_artifact_one_notice(harness, job)
    assert harness.provider_stats()["requests_by_key"] == {notice_key(job): 1}
    assert EffectLedgerEntry.objects.get(job=job, name=NOTICE).calls == 1


def test_crash_after_completion_commit_before_ack__redelivery_is_acked_without_rerunning(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    # Prefork: the child dies after the commit; the parent rejects the message back to the
    # queue (task_reject_on_worker_lost) and a fresh child receives it again.
    worker = harness.start_worker(
        "w1", env=worker_env(harness, JOBS_FAILPOINTS="worker.after_complete_before_ack=exit")
    )
    job = jobs.submit(kind="test.report_long", input=JOB_84, owner=user)

    wait_until(
        lambda: counter_value(DUPLICATE_DELIVERIES) == 1,
        timeout=90,
        what="the redelivered message to be counted as a duplicate",
    )
    wait_until(harness.broker_idle, timeout=30, what="the redelivery to be acked")

    assert "failpoint worker.after_complete_before_ack triggered" in worker.log()
    assert worker.alive()
    done = job_now(job)
    assert (done.state, done.generation, done.attempt) == ("succeeded", 1, 1)
    assert len(handler_calls(harness)) == 1  # the redelivery did not call the handler
    assert harness.provider_stats()["total_requests"] == 1
    assert_one_artifact_one_notice(harness, job)


def stop_children(worker: Proc, sig: int) -> list[int]:
    children = worker.children()
    assert children, "a prefork worker has a pool child"
    for pid in children:
        os.kill(pid, sig)
    return children


def test_lease_expiry_while_first_worker_paused__its_completion_is_rejected_and_counted(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_relay()
    # The sleep failpoint holds worker 1 right after the artifact and the notice, before completion.
    first = harness.start_worker(
        "w1", env=worker_env(harness, JOBS_FAILPOINTS="worker.after_effect_before_complete=sleep:8")
    )
    job = jobs.submit(kind="test.report", input=JOB_84, owner=user)
    wait_until(
        lambda: "failpoint worker.after_effect_before_complete triggered" in first.log(),
        timeout=60,
        what="worker 1 to reach the point before completion",
    )
    paused = stop_children(first, signal.SIGSTOP)
    try:
        assert harness.provider_stats()["notices"] == 1
        harness.start_worker("w2", env=worker_env(harness))
        reap_until_taken_over(job, generation=1)
        wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)

    wait_until(
        lambda: "stale write rejected at complete" in first.log(),
        timeout=60,
        what="worker 1's late completion to be rejected and logged",
    )
    assert counter_value(STALE_WRITES_REJECTED) >= 1
    done = job_now(job)
    assert (done.state, done.generation) == ("succeeded", 2)
    assert done.lease_owner is not None and done.lease_owner.startswith("w2:")
    assert_one_artifact_one_notice(harness, job)
    assert harness.provider_stats()["requests_by_key"] == {notice_key(job): 1}


def test_lease_expiry_while_first_worker_paused_mid_work__ledger_refuses_its_effect(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_relay()
    first = harness.start_worker("w1", env=worker_env(harness))
    # Generation 1 works 6 s before its artifact and notice; we freeze it in that work.
    job = jobs.submit(kind="test.report", input={**JOB_84, "work_seconds": 6}, owner=user)
    wait_until(lambda: len(handler_calls(harness)) == 1, timeout=60, what="worker 1 to start")
    paused = stop_children(first, signal.SIGSTOP)
    try:
        harness.start_worker("w2", env=worker_env(harness))
        reap_until_taken_over(job, generation=1)
        wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)

    wait_until(
        lambda: "stale write rejected" in first.log(),
        timeout=60,
        what="worker 1 to find its lease gone",
    )
    wait_until(lambda: "lease lost" in first.log(), timeout=30, what="worker 1 to give up")
    assert counter_value(STALE_WRITES_REJECTED) >= 1
    done = job_now(job)
    assert (done.state, done.generation) == ("succeeded", 2)
    entry = EffectLedgerEntry.objects.get(job=job, name=NOTICE)
    assert (entry.calls, entry.generation) == (1, 2)  # only the lease owner called out
    assert_one_artifact_one_notice(harness, job)
    assert harness.provider_stats()["requests_by_key"] == {notice_key(job): 1}


def test_provider_times_out_after_accepting__retry_reuses_the_key_one_logical_send(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.provider_control(timeout_after_accept=1, stall_seconds=3)
    harness.start_relay()
    harness.start_worker("w1", env=worker_env(harness, NOTIFY_PROVIDER_TIMEOUT="0.5"))
    job = jobs.submit(kind="test.report_long", input=JOB_84, owner=user)

    wait_until(lambda: job_now(job).state == "succeeded", timeout=90, what="the retry to succeed")

    done = job_now(job)
    assert (done.attempt, done.generation) == (2, 2)
    stats = harness.provider_stats()
    assert stats["requests_by_key"] == {notice_key(job): 2}  # same key both times
    assert stats["notices"] == 1  # one logical send
    entry = EffectLedgerEntry.objects.get(job=job, name=NOTICE)
    assert (entry.state, entry.calls, entry.generation) == ("applied", 2, 2)
    assert entry.outcome is not None and entry.outcome["replayed"] is True
    retry = JobEvent.objects.get(job=job, to_state="retry_wait")
    assert (retry.details["decision"], retry.details["category"]) == ("retry", "transient")
    assert_one_artifact_one_notice(harness, job)


def test_duplicate_delivery_during_live_lease__acked_and_left_to_the_owner(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_worker("w1", env=worker_env(harness))
    harness.start_worker("w2", env=worker_env(harness))
    job = jobs.submit(kind="test.report_long", input={**JOB_84, "work_seconds": 8}, owner=user)
    wait_until(lambda: len(handler_calls(harness)) == 1, timeout=60, what="the owner to start")

    # A duplicate publish of the same job (as after a relay crash before its mark).
    with transaction.atomic():
        outbox_enqueue(
            task_name="jobs.execute",
            queue="jobs",
            job_id=job.pk,
            kwargs={"job_id": str(job.pk), "generation": 0},
        )
    wait_until(
        lambda: counter_value(DUPLICATE_DELIVERIES) == 1,
        timeout=60,
        what="the duplicate delivery to be counted",
    )
    assert job_now(job).state == "leased"  # acked and left alone; the owner still works

    wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="the owner to finish")
    wait_until(harness.broker_idle, timeout=30, what="both messages acked")
    assert counter_value(DUPLICATE_DELIVERIES) == 1
    assert counter_value(DUPLICATE_EFFECTS) == 0
    assert job_now(job).generation == 1
    assert len(handler_calls(harness)) == 1
    assert harness.provider_stats()["total_requests"] == 1
    assert_one_artifact_one_notice(harness, job)


def test_sigkill_of_worker_main_process__job_recovered_and_effect_happens_once(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_relay()
    # Solo pool: the main process runs the handler, so SIGKILL takes the whole worker down.
    first = harness.start_worker("w1", pool="solo", env=worker_env(harness))
    job = jobs.submit(kind="test.report", input={**JOB_84, "work_after_seconds": 60}, owner=user)
    wait_until(
        lambda: harness.provider_stats()["notices"] == 1,
        timeout=60,
        what="worker 1 to send the notice",
    )

    first.signal(signal.SIGKILL)
    wait_until(lambda: not first.alive(), timeout=30, what="worker 1 to die")
    assert job_now(job).state == "leased"
    harness.start_worker("w2", env=worker_env(harness))
    reap_until_taken_over(job, generation=1)
    wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")

    assert job_now(job).generation == 2
    assert_killed_around_the_notice__one_logical_send(harness, job)


def test_sigkill_of_prefork_main_process__job_recovered_and_effect_happens_once(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_relay()
    first = harness.start_worker("w1", env=worker_env(harness))
    job = jobs.submit(kind="test.report", input={**JOB_84, "work_after_seconds": 60}, owner=user)
    wait_until(
        lambda: harness.provider_stats()["notices"] == 1,
        timeout=60,
        what="worker 1 to send the notice",
    )
    children = first.children()
    assert children

    first.signal(signal.SIGKILL)
    wait_until(lambda: not first.alive(), timeout=30, what="worker 1's main process to die")
    # Celery's prefork children carry PR_SET_PDEATHSIG=SIGKILL: no orphan keeps working.
    wait_until(
        lambda: not any(process_alive(pid) for pid in children),
        timeout=30,
        what="the pool child to die with its parent",
    )
    assert job_now(job).state == "leased"
    harness.start_worker("w2", env=worker_env(harness))
    reap_until_taken_over(job, generation=1)
    wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")

    assert job_now(job).generation == 2
    assert_killed_around_the_notice__one_logical_send(harness, job)


def test_worker_dies_right_after_claim__reaper_recovers_and_handler_runs_once_to_completion(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    harness.start_relay()
    first = harness.start_worker(
        "w1", pool="solo", env=worker_env(harness, JOBS_FAILPOINTS="worker.after_claim=exit")
    )
    job = jobs.submit(kind="test.report", input=JOB_84, owner=user)
    wait_until(lambda: not first.alive(), timeout=60, what="worker 1 to die after its claim")
    assert first.popen.returncode == 137
    assert (job_now(job).state, job_now(job).generation) == ("leased", 1)
    assert handler_calls(harness) == []

    harness.start_worker("w2", env=worker_env(harness))
    reap_until_taken_over(job, generation=1)
    wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")

    done = job_now(job)
    assert (done.generation, done.attempt) == (2, 2)  # the lost attempt counts
    assert len(handler_calls(harness)) == 1
    assert harness.provider_stats()["requests_by_key"] == {notice_key(job): 1}
    assert_one_artifact_one_notice(harness, job)


def test_worker_killed_while_provider_call_in_flight__retry_reuses_key_one_logical_send(
    harness: Harness, user: Any
) -> None:
    harness.start_provider()
    # The provider records the notice, then holds the answer: the worker dies waiting for it,
    # leaving a `pending` ledger row and an unknown outcome.
    harness.provider_control(timeout_after_accept=1, stall_seconds=60)
    harness.start_relay()
    first = harness.start_worker(
        "w1", pool="solo", env=worker_env(harness, NOTIFY_PROVIDER_TIMEOUT="120")
    )
    job = jobs.submit(kind="test.report", input=JOB_84, owner=user)
    wait_until(
        lambda: harness.provider_stats()["notices"] == 1,
        timeout=60,
        what="the provider to accept the notice",
    )
    assert EffectLedgerEntry.objects.get(job=job, name=NOTICE).state == "pending"

    first.signal(signal.SIGKILL)
    wait_until(lambda: not first.alive(), timeout=30, what="worker 1 to die")
    harness.start_worker("w2", env=worker_env(harness))
    reap_until_taken_over(job, generation=1)
    wait_until(lambda: job_now(job).state == "succeeded", timeout=60, what="worker 2 to finish")

    stats = harness.provider_stats()
    assert stats["requests_by_key"] == {notice_key(job): 2}  # called again, same key
    assert stats["notices"] == 1
    entry = EffectLedgerEntry.objects.get(job=job, name=NOTICE)
    assert (entry.state, entry.calls, entry.generation) == ("applied", 2, 2)
    assert entry.outcome is not None and entry.outcome["replayed"] is True
    assert_one_artifact_one_notice(harness, job)
