"""A worker killed between throttled progress writes: the job shows its last written report
(at most one throttle interval older than the last one made), and the next owner's reports
replace it."""

from __future__ import annotations

import os
import signal
from datetime import datetime
from typing import Any

import pytest

import jobs
import tests.kinds_progress  # noqa: F401  (registers the progress kinds in this process too)
from jobs.models import Job
from jobs.progress import PROGRESS_INTERVAL_SECONDS
from jobs.reaper import jobs_reap
from tests.harness import Harness, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

N = 400
STEP = 0.02  # a report every 20 ms: 25 of them per throttle interval


def _reports(path: str) -> list[tuple[int, int, float]]:
    """(generation, done, wall time) of every report the handler made."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [(int(g), int(d), float(t)) for g, d, t in (line.split() for line in handle)]


def _progress(job: Job) -> dict[str, Any]:
    value = Job.objects.get(pk=job.pk).progress
    return value if isinstance(value, dict) else {}


def test_worker_killed_between_throttled_writes__last_value_at_most_one_interval_old(
    harness: Harness, user: Any, calls_file: str
) -> None:
    job = jobs.submit(kind="progress.crashy", input={"n": N, "step": STEP}, owner=user)
    harness.start_relay()
    worker = harness.start_worker("w-progress", JOBS_HANDLER_MODULES="tests.kinds_progress")
    child = worker.pool_child()
    wait_until(
        lambda: _progress(job).get("done", 0) >= 50,
        timeout=60,
        interval=0.02,
        what="the handler to report progress",
    )
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: child not in worker.children(), timeout=30, what="the pool child to die")

    shown = _progress(job)
    made = [r for r in _reports(calls_file) if r[0] == 1]
    _, last_done, last_at = made[-1]
    assert 50 <= shown["done"] <= last_done < N
    assert shown["message"] == "generation 1"
    written_at = datetime.fromisoformat(shown["updated_at"]).timestamp()
    # Written no longer than one interval (plus a write's and a kill's slack) before the
    # last report the killed handler made.
    assert last_at - written_at <= PROGRESS_INTERVAL_SECONDS + 0.5, (last_at, written_at)

    def finished() -> bool:
        jobs_reap()
        return Job.objects.get(pk=job.pk).state == "succeeded"

    wait_until(finished, timeout=90, interval=0.3, what="the job to be taken over and finish")
    final = _progress(job)
    assert (final["done"], final["total"], final["message"]) == (N, N, "generation 2")
