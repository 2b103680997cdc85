"""Kinds for the batch crash tests (tests/chaos/test_batch_crashes.py).

Worker processes load them with JOBS_HANDLER_MODULES=tests.kinds_batch_chaos; the test
process imports this module too, so `jobs.submit_many` and the relay know the kinds are
batchable (jobs.dispatch.batchable) and the reaper knows their policies.

Side channels, outside the database the handlers write through (env BATCH_CHAOS_LOG_DIR):
  - starts.log: one line `<job id> <attempt> <pid> <unix time>` each time a handler starts;
  - effects.log: one line `<idempotency key> <pid>` each time an effect's call is made
    (the function `ctx.effect` runs at most once to success per key, the ledger says).
Each line is one O_APPEND write, so lines of killed processes are never torn or lost.
Short leases (2 s) and small backoffs, so a killed batch is recovered in seconds.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from jobs.context import JobContext
from jobs.registry import handler

LOG_DIR_ENV = "BATCH_CHAOS_LOG_DIR"
STARTS = "starts.log"
EFFECTS = "effects.log"
EFFECT_NAME = "mark"


def _append(name: str, line: str) -> None:
    directory = os.environ.get(LOG_DIR_ENV)
    if not directory:
        return
    fd = os.open(Path(directory) / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def _started(ctx: JobContext) -> None:
    # job, attempt, pid, time, parent pid (the worker whose pool ran it)
    _append(STARTS, f"{ctx.job_id} {ctx.attempt} {os.getpid()} {time.time():.3f} {os.getppid()}")


def _sleep(ctx: JobContext, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.02)


def _mark(key: str) -> dict[str, Any]:
    _append(EFFECTS, f"{key} {os.getpid()}")
    return {"marked": key}


@handler(
    "bchaos.step", lease_seconds=2, max_attempts=5, max_elapsed=600, base_delay=0.1, max_delay=0.5
)
def bchaos_step(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Work, one ledgered external effect, more work: the kill windows of a batch."""
    _started(ctx)
    _sleep(ctx, float(input.get("before", 0.0)))
    outcome = ctx.effect(EFFECT_NAME, _mark)
    _sleep(ctx, float(input.get("after", 0.0)))
    return {"effect": outcome, "attempt": ctx.attempt}


@handler(
    "bchaos.poison",
    lease_seconds=2,
    max_attempts=3,
    max_elapsed=600,
    base_delay=0.1,
    max_delay=0.3,
    responsible="chaos-team",
)
def bchaos_poison(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Kills the process that runs it, every time (a segfaulting library, an OOM kill)."""
    _started(ctx)
    os._exit(137)
