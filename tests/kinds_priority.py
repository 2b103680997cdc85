"""Test-only kinds for priorities (tests/integration/test_priority.py, tests/chaos).

Workers load this module through env JOBS_HANDLER_MODULES=tests.kinds_priority. Each call
appends `<kind> <job id> <monotonic-free wall time>` to the file named by env
JOBS_TEST_CALLS_FILE, so a test sees the order in which jobs started across processes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from jobs.context import JobContext
from jobs.exceptions import TransientError
from jobs.registry import handler

CALLS_FILE_ENV = "JOBS_TEST_CALLS_FILE"


def started_kinds(calls_file: str) -> list[str]:
    """The kinds of the jobs in the order their handlers started (first call of each job)."""
    seen: set[str] = set()
    kinds: list[str] = []
    for line in Path(calls_file).read_text().splitlines():
        kind, job_id, _ = line.split()
        if job_id not in seen:
            seen.add(job_id)
            kinds.append(kind)
    return kinds


def _record(kind: str, ctx: JobContext) -> None:
    path = os.environ.get(CALLS_FILE_ENV)
    if path:
        with open(path, "a") as out:
            out.write(f"{kind} {ctx.job_id} {time.time():.6f}\n")


@handler("prio.low", priority=-100, max_attempts=5)
def low(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    _record("prio.low", ctx)
    return {}


@handler("prio.plain", max_attempts=5)
def plain(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    _record("prio.plain", ctx)
    return {}


@handler("prio.high", priority=100, max_attempts=5)
def high(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    _record("prio.high", ctx)
    return {}


@handler("prio.flaky", max_attempts=3)
def flaky(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Fails its first attempt (a retry), succeeds on the next."""
    _record("prio.flaky", ctx)
    if ctx.attempt == 1:
        raise TransientError("the first attempt fails")
    return {}
