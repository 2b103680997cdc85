"""Drill kinds for the API: read a referenced upload, optionally after a go-ahead signal."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from django.core.files.storage import default_storage

from jobs.context import JobContext
from jobs.exceptions import TransientError
from jobs.registry import handler

READ_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        # Wait for the storage file `drill-signals/<job id>` before reading (revocation drills).
        "wait_for_signal": {"type": "boolean"},
        "max_wait": {"type": "number", "minimum": 0, "maximum": 600},
    },
    "additionalProperties": False,
}


def signal_name(job_id: Any) -> str:
    """Where a test drops the go-ahead for a waiting `drill.read_input` job."""
    return f"drill-signals/{job_id}"


@handler(
    "drill.read_input",
    max_attempts=3,
    lease_seconds=10,
    base_delay=0.2,
    max_delay=1,
    responsible="platform-team",
    input_schema=READ_INPUT_SCHEMA,
)
def drill_read_input(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Reads its input object only through ctx.open_input(), which re-checks access first."""
    if input.get("wait_for_signal"):
        deadline = time.monotonic() + float(input.get("max_wait", 60))
        # The heartbeat thread keeps the lease alive while we wait.
        while not default_storage.exists(signal_name(ctx.job_id)):
            if ctx.cancelled:
                return {"read": False}
            if time.monotonic() > deadline:
                raise TransientError("no go-ahead signal before max_wait")
            time.sleep(0.05)
    with ctx.open_input() as stream:
        data = stream.read()
    # Facts about the bytes, never the bytes: results are readable by the whole tenant.
    return {"read": True, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
