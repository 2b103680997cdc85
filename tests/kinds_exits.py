"""Kinds whose handlers raise BaseExceptions (tests/integration/test_handler_base_exceptions.py).

Workers load them with JOBS_HANDLER_MODULES=tests.kinds_exits; the test process imports this
module too, so `jobs.submit_many` packs them into batch messages and in-process deliveries know
them. Leases are long (60 s) on purpose: a job that ends within seconds was not recovered by
the reaper after an expired lease. Which process ran an attempt is in its claim's lease-owner
token (`<worker>:<nonce>:<pid>`).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from celery.exceptions import WorkerShutdown, WorkerTerminate

from jobs.context import JobContext
from jobs.registry import handler

LEASE = 60
_FAST_RETRY: dict[str, Any] = {"lease_seconds": LEASE, "base_delay": 0.05, "max_delay": 0.1}


class Abort(BaseException):
    """A BaseException of the handler's own: not a shutdown of the worker."""


# What a worker raises to stop itself (and Ctrl-C, and a generator closed under it).
STOPS: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "WorkerShutdown": WorkerShutdown,
    "WorkerTerminate": WorkerTerminate,
}


@handler("exits.sys_exit", max_attempts=2, **_FAST_RETRY)
def exits_sys_exit(ctx: JobContext, input: dict[str, Any]) -> NoReturn:
    """A ported script's `sys.exit(code)`."""
    sys.exit(int(input.get("code", 3)))


@handler("exits.ok", **_FAST_RETRY)
def exits_ok(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    return {"pid": os.getpid()}


@handler("exits.abort", max_attempts=1, **_FAST_RETRY)
def exits_abort(ctx: JobContext, input: dict[str, Any]) -> NoReturn:
    raise Abort("the handler gave up")


@handler("exits.stop", max_attempts=1, **_FAST_RETRY)
def exits_stop(ctx: JobContext, input: dict[str, Any]) -> NoReturn:
    """Raises the worker-stopping exception named by `input["raise"]`."""
    raise STOPS[input["raise"]]()


@handler("exits.local_effect_exit", max_attempts=1, **_FAST_RETRY)
def exits_local_effect_exit(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Returns a result whose local effect calls `sys.exit` inside the completion."""

    def receipt(key: str) -> NoReturn:
        sys.exit(4)

    ctx.local_effect("receipt", receipt)
    return {"ok": True}


@handler("exits.wait", max_attempts=2, **_FAST_RETRY)
def exits_wait(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Touches `input["started"]`, then works for up to `seconds` (a process to signal)."""
    Path(input["started"]).touch()
    deadline = time.monotonic() + float(input.get("seconds", 30))
    while time.monotonic() < deadline and not ctx.cancelled:
        time.sleep(0.02)
    return {"pid": os.getpid()}
