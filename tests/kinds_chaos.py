"""Kinds for the chaos soak (workers load them with JOBS_HANDLER_MODULES=tests.kinds_chaos).

Short leases (2-3 s) so a killed or stopped worker's job is recovered in seconds; budgets
large enough that the injected faults alone never exhaust a job that should succeed.
"""

from __future__ import annotations

import os
import time
from typing import Any, TypedDict

from demo.notify import notify_send
from jobs.context import JobContext
from jobs.exceptions import PermanentError, TransientError
from jobs.registry import handler

# Expected end state per kind, read by the checker.
EXPECTED: dict[str, set[str]] = {
    "chaos.sleep": {"succeeded", "cancelled"},
    "chaos.flaky": {"succeeded"},
    "chaos.notify": {"succeeded"},
    "chaos.permanent": {"quarantined"},
    "chaos.crash": {"quarantined"},
    "chaos.fan_out": {"succeeded"},
    "chaos.join": {"succeeded"},
}


class _Budget(TypedDict):
    """The retry budget of every chaos kind (keyword arguments of `handler`)."""

    max_attempts: int
    max_elapsed: float
    base_delay: float
    max_delay: float


_BUDGET = _Budget(max_attempts=40, max_elapsed=7200, base_delay=0.2, max_delay=2.0)


def _sleep(ctx: JobContext, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.02)


@handler("chaos.sleep", lease_seconds=2, **_BUDGET)
def chaos_sleep(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Sleeps (cooperatively) and records one local effect in the completion transaction."""
    _sleep(ctx, float(input.get("seconds", 0.2)))
    ctx.local_effect("receipt", lambda key: {"receipt": key})
    return {"slept": input.get("seconds", 0.2), "attempt": ctx.attempt}


@handler("chaos.flaky", lease_seconds=2, **_BUDGET)
def chaos_flaky(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Fails transiently on its first `fail_times` attempts, then sends one notice."""
    if ctx.attempt <= int(input.get("fail_times", 1)):
        raise TransientError(f"dependency unavailable on attempt {ctx.attempt}")
    ctx.effect(
        "notice", lambda key: notify_send(idempotency_key=key, body={"job": str(ctx.job_id)})
    )
    return {"attempt": ctx.attempt}


@handler("chaos.notify", lease_seconds=3, **_BUDGET)
def chaos_notify(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """One notice through the ledger, with work before and after it (kill windows)."""
    _sleep(ctx, float(input.get("before", 0.1)))
    notice = ctx.effect(
        "notice", lambda key: notify_send(idempotency_key=key, body={"job": str(ctx.job_id)})
    )
    _sleep(ctx, float(input.get("after", 0.1)))
    return {"notice": notice}


@handler("chaos.permanent", lease_seconds=2, responsible="chaos-team", **_BUDGET)
def chaos_permanent(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """A malformed payload: permanent, quarantined without a retry."""
    raise PermanentError("malformed payload (chaos)")


@handler(
    "chaos.crash",
    lease_seconds=2,
    max_attempts=3,
    max_elapsed=7200,
    base_delay=0.1,
    max_delay=0.5,
    responsible="chaos-team",
)
def chaos_crash(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """The poison job: kills its worker process on every attempt."""
    os._exit(137)


@handler("chaos.fan_out", lease_seconds=2, **_BUDGET)
def chaos_fan_out(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Follow-ups and fan-in: `n` notify children (at this job's priority) and one join
    after them, all written with this job's success; then work after asking (a kill there
    must leave no child behind)."""
    n = int(input.get("n", 2))
    children = [
        ctx.submit("chaos.notify", {"before": 0.0, "after": 0.0}, priority=ctx.priority)
        for _ in range(n)
    ]
    join = ctx.submit("chaos.join", {"n": n}, after=children)
    _sleep(ctx, float(input.get("after", 0.0)))
    return {"children": [str(c) for c in children], "join": str(join)}


@handler("chaos.join", lease_seconds=2, **_BUDGET)
def chaos_join(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Runs once every sibling ended and sees each one's outcome (a wrong count is
    permanent, so it shows as a quarantined join)."""
    outcomes = ctx.dependencies()
    if len(outcomes) != int(input["n"]):
        raise PermanentError(f"join saw {len(outcomes)} dependencies, expected {input['n']}")
    ctx.local_effect("receipt", lambda key: {"receipt": key})
    return {"states": sorted(d.state for d in outcomes)}
