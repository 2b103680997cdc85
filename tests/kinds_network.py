"""Kinds for the network tests: a handler that watches ctx.cancelled while its lease runs.

Workers load them with JOBS_HANDLER_MODULES=tests.kinds_network; the test process imports this
module too. `net.watch` notes in the directory JOBS_TEST_WATCH_DIR when it started and when it
stopped (wall clock, to compare with the job's `lease_until` on the same machine), then returns.
`net.hold` notes the same, but works until the test writes its release note (`release(job_id)`)
or it is told to stop: a run that lasts exactly as long as the test needs, however slow the
machine.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from jobs.context import JobContext
from jobs.registry import handler

WATCH_DIR_ENV = "JOBS_TEST_WATCH_DIR"
WATCH_LEASE = 3.0  # heartbeats every second; in doubt 2.7 s after the last one answered
HOLD_CAP = 120.0  # seconds: a run the test never releases still ends (after its timeout)


def watch_note(job_id: Any, what: str) -> Path:
    return Path(os.environ[WATCH_DIR_ENV]) / f"{job_id}.{what}"


def release(job_id: Any) -> None:
    """Let the job's `net.hold` run finish (every run of it, from now on)."""
    _note(job_id, "release", {"at": time.time()})


def _note(job_id: Any, what: str, data: dict[str, Any]) -> None:
    """Written whole, then renamed: a reader that sees the file sees all of it."""
    path = watch_note(job_id, what)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data))
    partial.replace(path)


@handler("net.watch", max_attempts=3, lease_seconds=WATCH_LEASE, base_delay=0.1, max_delay=0.5)
def net_watch(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Works in small steps until told to stop (or `seconds` pass), as a provider loop would."""
    _note(ctx.job_id, "started", {"at": time.time()})
    deadline = time.monotonic() + float(input.get("seconds", 30))
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.02)
    stopped = {"at": time.time(), "in_doubt": ctx.lease_in_doubt, "lost": ctx.lease_lost}
    _note(ctx.job_id, "stopped", stopped)
    return {"stopped": stopped}


@handler("net.hold", max_attempts=3, lease_seconds=WATCH_LEASE, base_delay=0.1, max_delay=0.5)
def net_hold(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Works in small steps until released by the test or told to stop."""
    _note(ctx.job_id, "started", {"at": time.time()})
    released = watch_note(ctx.job_id, "release")
    deadline = time.monotonic() + HOLD_CAP
    while not released.exists() and not ctx.cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    stopped = {
        "at": time.time(),
        "released": released.exists(),
        "in_doubt": ctx.lease_in_doubt,
        "lost": ctx.lease_lost,
    }
    _note(ctx.job_id, "stopped", stopped)
    return {"stopped": stopped}
