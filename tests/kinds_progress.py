"""Test-only kinds that report progress (ctx.progress), on the one-job and the batch path.

The test process imports this module so `jobs.submit` and in-process runs know the kinds;
workers load it through env JOBS_HANDLER_MODULES=tests.kinds_progress.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone

from jobs.context import JobContext
from jobs.models import Job
from jobs.registry import handler

CALLS_FILE_ENV = "JOBS_TEST_CALLS_FILE"
# The owner token of the worker that takes a lease over in `progress.stolen`.
THIEF = "progress-test-thief"
# What the thief reports as its own progress: a stale worker must not overwrite it.
THIEFS_PROGRESS = {"done": 1, "total": 2, "message": "new owner", "updated_at": "thief"}

_POLICY: dict[str, Any] = {"max_attempts": 5, "max_elapsed": 600, "base_delay": 0.1}


def _loop(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """`n` reports of `i of n` in a loop (`step` seconds of work each); returns the last."""
    n, step = int(input["n"]), float(input.get("step", 0))
    for i in range(1, n + 1):
        if step:
            time.sleep(step)
        ctx.progress(i, n, f"step {i}")
    return {"reported": n}


handler("progress.loop", lease_seconds=30, **_POLICY)(_loop)
handler("progress.loop_alone", lease_seconds=30, batch=False, **_POLICY)(_loop)


@handler("progress.silent", lease_seconds=30, **_POLICY)
def progress_silent(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Never reports: its run must cost no progress write."""
    return {}


@handler("progress.stolen", lease_seconds=30, **_POLICY)
def progress_stolen(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Reports once, then another worker takes the lease over (generation + 1, its own owner
    token, its own progress), as after an expiry; then reports again, as a stale worker:
    within the throttle interval, so it is pending and written (refused) at the handler's end."""
    ctx.progress(1, 10, "first owner")
    Job.objects.filter(pk=ctx.job_id, state="leased").update(
        generation=F("generation") + 1,
        lease_owner=THIEF,
        lease_until=timezone.now() + timedelta(seconds=120),
        progress=THIEFS_PROGRESS,
    )
    ctx.progress(9, 10, "stale owner")
    return {"unreachable": True}


@handler("progress.crashy", lease_seconds=2, **_POLICY)
def progress_crashy(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """`n` reports, `step` seconds apart in the first generation (a test kills it meanwhile),
    at once in a later one; each report's done and wall time appended to the calls file."""
    n = int(input["n"])
    step = float(input["step"]) if ctx.generation == 1 else 0.0
    path = os.environ.get(CALLS_FILE_ENV)
    for i in range(1, n + 1):
        time.sleep(step)
        ctx.progress(i, n, f"generation {ctx.generation}")
        if path:
            with open(path, "a") as calls:
                calls.write(f"{ctx.generation} {i} {time.time()}\n")
    return {"reported": n}
