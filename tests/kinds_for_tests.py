"""Test-only kinds: seed 004's job 84 (the real `report.generate` handler) with short leases.

Workers load this module through env JOBS_HANDLER_MODULES=tests.kinds_for_tests; the test
process imports it so `jobs.submit` knows the kinds. Every handler call is appended to the
file named by env JOBS_TEST_CALLS_FILE, so a test can count calls across processes.
"""

from __future__ import annotations

import os
import time
from typing import Any

from demo.kinds import report_generate
from jobs.context import JobContext
from jobs.registry import handler

CALLS_FILE_ENV = "JOBS_TEST_CALLS_FILE"


def _record_call(ctx: JobContext) -> None:
    """One line per handler call (O_APPEND: atomic for short lines across processes)."""
    path = os.environ.get(CALLS_FILE_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{ctx.job_id} {ctx.generation} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def _pause(seconds: float, ctx: JobContext) -> None:
    """Work that takes a while; small steps so a lost lease shows up promptly."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.lease_lost:
        time.sleep(0.05)


def _report(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Job 84: the real report handler (artifact + one notice), wrapped in optional work.

    `work_seconds` (before the artifact) and `work_after_seconds` (after the notice) apply to
    the first generation only, so a take-over by a second worker finishes promptly.
    """
    _record_call(ctx)
    first = ctx.generation == 1
    _pause(float(input.get("work_seconds", 0)) if first else 0.0, ctx)
    result = report_generate(ctx, {"title": input["title"], "rows": input.get("rows", [])})
    _pause(float(input.get("work_after_seconds", 0)) if first else 0.0, ctx)
    return result


# A short lease so expiry, reaping and take-over happen within a test's patience.
handler(
    "test.report",
    max_attempts=6,
    max_elapsed=600,
    lease_seconds=2,
    base_delay=0.1,
    max_delay=0.5,
    responsible="tests",
)(_report)
# A comfortable lease for tests where the lease must stay alive under a loaded machine.
handler(
    "test.report_long",
    max_attempts=6,
    max_elapsed=600,
    lease_seconds=20,
    base_delay=0.1,
    max_delay=0.5,
    responsible="tests",
)(_report)
