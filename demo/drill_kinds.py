"""Kinds that misbehave on purpose, for the drills, the demo and the chaos soak.

Registered only by naming this module (JOBS_HANDLER_MODULES=demo.drill_kinds, as the tests and
`manage.py jobs_demo` do): `drill.crash` kills its worker process, so an autodiscovered
`kinds` module would put a kill switch on the public API. demo.apps refuses them in production.
"""

from __future__ import annotations

import os
import time
from typing import Any

from jobs.context import JobContext
from jobs.exceptions import PermanentError, TransientError
from jobs.registry import handler

from . import api_drill_kinds  # noqa: F401  (drill.read_input)
from .notify import notify_send


@handler("drill.sleep", max_attempts=5, lease_seconds=10, base_delay=0.2, max_delay=2)
def drill_sleep(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Sleeps in small steps, checking ctx.cancelled (cooperative cancellation)."""
    deadline = time.monotonic() + float(input.get("seconds", 1))
    while time.monotonic() < deadline:
        if ctx.cancelled:
            return {"slept": False}
        time.sleep(0.05)
    return {"slept": True}


@handler(
    "drill.flaky", max_attempts=6, max_elapsed=600, lease_seconds=10, base_delay=0.2, max_delay=2
)
def drill_flaky(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Fails transiently on its first `fail_times` attempts, then sends one notice."""
    if ctx.attempt <= int(input.get("fail_times", 2)):
        raise TransientError(f"dependency unavailable on attempt {ctx.attempt}")
    if input.get("notify"):
        ctx.effect(
            "notice",
            lambda key: notify_send(idempotency_key=key, body={"job_id": str(ctx.job_id)}),
        )
    return {"attempt": ctx.attempt}


@handler(
    "drill.always_transient",
    max_attempts=50,
    max_elapsed=3,
    lease_seconds=10,
    base_delay=0.2,
    max_delay=0.5,
)
def drill_always_transient(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Never succeeds: shows the elapsed budget ending retries before the attempt budget."""
    raise TransientError("still down")


@handler("drill.malformed", max_attempts=5, lease_seconds=10, responsible="ingest-team")
def drill_malformed(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Rejects a payload it cannot parse: a permanent failure, never retried."""
    if not isinstance(input.get("document_id"), int):
        raise PermanentError("malformed payload: document_id must be an integer")
    return {"document_id": input["document_id"]}


@handler(
    "drill.crash",
    max_attempts=3,
    lease_seconds=2,
    base_delay=0.1,
    max_delay=0.5,
    responsible="platform-team",
)
def drill_crash(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """The poison job: kills its worker process every attempt until the fix is deployed."""
    if os.environ.get("JOBS_DRILL_CRASH_FIXED") != "1":
        os._exit(137)
    return {"fixed": True}


@handler("drill.notify", max_attempts=6, lease_seconds=10, base_delay=0.2, max_delay=2)
def drill_notify(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """One notice through the ledger, optionally after some work."""
    time.sleep(float(input.get("work_seconds", 0)))
    notice = ctx.effect(
        "notice", lambda key: notify_send(idempotency_key=key, body={"job_id": str(ctx.job_id)})
    )
    return {"notice": notice}
