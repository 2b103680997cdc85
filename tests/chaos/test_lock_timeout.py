"""A database that answers with an error of the statement is reachable: a completion that waits
past lock_timeout for a row another session holds is refused, and tried again after a pause
(jobs.gate.retried_when_refused): a lock released meanwhile costs the job nothing but the wait,
its finished attempt commits. Refused every time, the message goes back to the queue (not
acked) and the worker goes on consuming; it does not pause as it would for an unreachable
database. The job's attempt is then not lost either: its lease expires and the reaper retries
it, and it succeeds once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import jobs
from jobs.gate import REFUSED_PAUSE, REFUSED_TRIES
from jobs.models import Job, JobEvent
from jobs.reaper import jobs_reap
from tests.harness import Harness, Proc, wait_until
from tests.integration.test_lock_timeout import LOCK_TIMEOUT, row_locked
from tests.kinds_network import WATCH_DIR_ENV, watch_note

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]


def _state(job_id: Any) -> str:
    return Job.objects.get(pk=job_id).state


# Every try waits out the lock timeout, then pauses (the last one does not).
ALL_TRIES = REFUSED_TRIES * LOCK_TIMEOUT + sum(REFUSED_PAUSE[1] * n for n in range(REFUSED_TRIES))


def _worker_running_a_job(
    harness: Harness, user: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> tuple[Proc, Job]:
    """A real worker (and relay) with a `net.watch` job whose handler has started."""
    monkeypatch.setenv(WATCH_DIR_ENV, str(tmp_path))
    harness.start_relay()
    worker = harness.start_worker(
        name, JOBS_HANDLER_MODULES="tests.kinds_network", env={WATCH_DIR_ENV: str(tmp_path)}
    )
    held = jobs.submit(kind="net.watch", input={"seconds": 1.5}, owner=user)
    wait_until(watch_note(held.pk, "started").exists, timeout=30, what="the handler to start")
    return worker, held


@pytest.mark.timeout(120)
def test_completion_refused_once__tried_again_and_the_finished_attempt_commits(
    harness: Harness, user: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, held = _worker_running_a_job(harness, user, tmp_path, monkeypatch, "locked-w0")
    with row_locked(held.pk):
        wait_until(
            lambda: "trying again (2 of" in worker.log(),
            timeout=LOCK_TIMEOUT + 10,
            what="the completion's first refusal",
        )
    wait_until(lambda: _state(held.pk) == "succeeded", timeout=LOCK_TIMEOUT + 5, what="success")
    job = Job.objects.get(pk=held.pk)
    assert job.generation == 1, "the attempt that ran is the one that committed"
    events = JobEvent.objects.filter(job_id=held.pk)
    assert events.filter(to_state="leased").count() == 1
    assert events.filter(to_state="succeeded").count() == 1
    assert "refused a statement" not in worker.log()  # the message was never requeued
    assert "stops consuming" not in worker.log()


@pytest.mark.timeout(150)
def test_completion_refused_by_a_held_row_lock__requeued_and_the_worker_keeps_consuming(
    harness: Harness, user: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, held = _worker_running_a_job(harness, user, tmp_path, monkeypatch, "locked-w1")

    with row_locked(held.pk):
        locked_at = time.monotonic()
        wait_until(
            lambda: "refused a statement" in worker.log(),
            timeout=ALL_TRIES + 10,
            what="the completion's last refusal",
        )
        # it waited for the lock on every try
        assert time.monotonic() - locked_at >= REFUSED_TRIES * (LOCK_TIMEOUT - 0.5)
        other = jobs.submit(kind="noop", input={}, owner=user)
        wait_until(
            lambda: _state(other.pk) == "succeeded",
            timeout=15,
            what="a job submitted after the refusal, while the row is still locked",
        )
    assert "stops consuming" not in worker.log()
    assert "SQLSTATE 55P03" in worker.log()

    def retried_and_done() -> bool:
        jobs_reap()  # what the beat runs every JOBS_REAP_INTERVAL
        return _state(held.pk) == "succeeded"

    wait_until(retried_and_done, timeout=30, what="the held job to be retried and succeed")
    assert JobEvent.objects.filter(job_id=held.pk, to_state="succeeded").count() == 1
    assert worker.alive()
