"""Kinds for `manage.py jobs_demo`: the seed's jobs with short leases, so a drill takes seconds.

The demo's workers import this module through env JOBS_HANDLER_MODULES=demo.demo_kinds; it
registers the drill kinds too (demo.drill_kinds).
"""

from __future__ import annotations

import time
from typing import Any

from jobs.context import JobContext
from jobs.registry import handler

from . import drill_kinds  # noqa: F401  (the demo's drills: drill.malformed, drill.notify...)
from .kinds import REPORT_SCHEMA, report_generate

# Job 84: the same handler as report.generate (artifact, then one notice through the ledger),
# with a 3 s lease so a dead worker's job is taken over quickly.
handler(
    "demo.report",
    max_attempts=5,
    max_elapsed=600,
    lease_seconds=3,
    base_delay=0.2,
    max_delay=1,
    responsible="reports-team",
    input_schema=REPORT_SCHEMA,
)(report_generate)


@handler(
    "demo.slow",
    max_attempts=5,
    max_elapsed=600,
    lease_seconds=3,
    base_delay=0.2,
    max_delay=0.5,
    responsible="platform-team",
)
def demo_slow(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Works for `seconds` without looking at ctx.cancelled: a pause makes it finish late."""
    deadline = time.monotonic() + float(input.get("seconds", 4))
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return {"worked_seconds": float(input.get("seconds", 4)), "generation": ctx.generation}
