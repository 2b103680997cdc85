"""Test-only kinds for the bounded-failure tests (workers load them via JOBS_HANDLER_MODULES).

`bounded.slow` works in small steps under a short lease (heartbeat every second) and records
which worker ran it, so a paused worker's late writes can be told from the second worker's.
"""

from __future__ import annotations

import os
import time
from typing import Any

from jobs.context import JobContext
from jobs.registry import handler


@handler("bounded.slow", max_attempts=5, lease_seconds=3, base_delay=0.1, max_delay=0.5)
def bounded_slow(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Sleeps `seconds` in 50 ms steps; stops early when the lease is lost or cancelled."""
    deadline = time.monotonic() + float(input.get("seconds", 1))
    while time.monotonic() < deadline:
        if ctx.cancelled:
            return {"worker": os.environ.get("JOBS_WORKER_NAME", ""), "finished": False}
        time.sleep(0.05)
    return {"worker": os.environ.get("JOBS_WORKER_NAME", ""), "finished": True}
