"""`@task` functions of tests/integration/test_django_tasks.py, run by jobs.tasks_backend.

Import it only while TASKS names the durable backend (the test's fixture sets it first):
`@task(max_attempts=...)` builds the backend's task class at import. Workers import it by the
kind's path; nothing registers it. Calls that matter are appended to the file named by env
JOBS_TEST_CALLS_FILE, so a test counts them across processes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.tasks import TaskContext, task

from jobs.exceptions import TransientError
from jobs.tasks_backend import job_context

CALLS_FILE_ENV = "JOBS_TEST_CALLS_FILE"


def record(line: str) -> None:
    """One line per call (O_APPEND: atomic for short lines across processes)."""
    path = os.environ.get(CALLS_FILE_ENV)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def _wait_for_file(path: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Path(path).exists():
            return True
        time.sleep(0.05)
    return False


@task
def add(a: int, b: int) -> int:
    record(f"add {a} {b}")
    return a + b


@task
def echo(value: Any) -> Any:
    return value


@task
def user_exists(username: str) -> bool:
    """Reads what the enqueuing transaction wrote: it committed with the job."""
    return get_user_model().objects.filter(username=username).exists()


@task(max_attempts=1)  # type: ignore[call-overload]
def explode(message: str) -> None:
    raise ValueError(message)


@task(max_attempts=1, lease_seconds=60)  # type: ignore[call-overload]  # a long lease: its expiry cannot end it
def script_exit(code: int) -> None:
    """A ported script's `sys.exit()`: a failure of this task, not of the worker process."""
    sys.exit(code)


@task
def not_json() -> Any:
    return {"when": datetime.now(UTC)}


@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int) -> dict[str, Any]:
    """Fails with a transient error until attempt `succeed_on`."""
    record(f"flaky attempt {context.attempt}")
    if context.attempt < succeed_on:
        raise TransientError(f"attempt {context.attempt}: the provider is down")
    return {
        "attempt": context.attempt,
        "result_id": context.task_result.id,
        "status": str(context.task_result.status),
        "workers": len(context.task_result.worker_ids),
    }


@task(max_attempts=2, responsible="billing-team")  # type: ignore[call-overload]
def always_down() -> None:
    raise TransientError("the provider is down")


@task
def wait_for(path: str, timeout: float = 60.0) -> str:
    """RUNNING until the test creates `path`."""
    return "released" if _wait_for_file(path, timeout) else "timed out"


def _charge(order: int, key: str) -> dict[str, Any]:
    record(f"charge {order} {key}")
    return {"charge_id": f"ch-{order}", "key": key}


@task(takes_context=True, lease_seconds=2, max_attempts=4, base_delay=0.1, max_delay=0.2)  # type: ignore[call-overload]
def charge_once(context: TaskContext, order: int, hold_path: str) -> dict[str, Any]:
    """One external charge through the effect ledger; attempt 1 then hangs (the test kills
    its worker), a later attempt reuses the applied entry and finishes."""
    job = job_context(context)
    charge = job.effect("charge", lambda key: _charge(order, key))
    if context.attempt == 1:
        Path(hold_path).write_text("charged")
        _wait_for_file(hold_path + ".never", timeout=120)
    return {"charge": charge, "attempt": context.attempt}


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(business_key="report:{0}")  # type: ignore[call-overload]
def report(number: int) -> int:
    return number


@task(  # type: ignore[call-overload]
    input_schema={
        "type": "object",
        "properties": {
            "args": {"type": "array", "maxItems": 0},
            "kwargs": {
                "type": "object",
                "properties": {"name": {"type": "string", "minLength": 1}},
                "required": ["name"],
                "additionalProperties": False,
            },
        },
    }
)
def greet(name: str) -> str:
    return f"hello {name}"
