"""Test-only kinds for the batch path (jobs.batch, outbox.batching, jobs.submit_many).

Workers and relays load this module through env JOBS_HANDLER_MODULES=tests.kinds_batch; the
test process imports it, so submissions and in-process batches know the kinds. Every handler
call, and every call of an external effect, appends one line to the file named by env
JOBS_TEST_CALLS_FILE: `<what> <job id> <generation> <attempt> <pid>`, so a test can count
calls across processes.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone

from jobs.context import JobContext
from jobs.exceptions import PermanentError, TransientError
from jobs.models import Job
from jobs.registry import handler

CALLS_FILE_ENV = "JOBS_TEST_CALLS_FILE"
THIEF = "batch-test-thief"
OTHER_QUEUE = "jobs_batch_other"

_POLICY: dict[str, Any] = {"max_attempts": 5, "max_elapsed": 600, "base_delay": 0.1}


def record(what: str, ctx: JobContext) -> None:
    """One line per call (O_APPEND: atomic for short lines across processes)."""
    path = os.environ.get(CALLS_FILE_ENV)
    if not path:
        return
    line = f"{what} {ctx.job_id} {ctx.generation} {ctx.attempt} {os.getpid()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def calls(path: str, what: str = "run") -> list[tuple[str, int, int]]:
    """(job id, generation, attempt) of each recorded call of `what`, in order."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        rows = [line.split() for line in handle if line.strip()]
    return [(row[1], int(row[2]), int(row[3])) for row in rows if row[0] == what]


def _pause(ctx: JobContext, seconds: float) -> None:
    """Work that takes a while, in small steps so a lost lease shows up promptly."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.lease_lost:
        time.sleep(0.02)


def _echo(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Records the call; `sleep` seconds of work; fails (`raise`: transient or permanent) while
    the attempt is at most `fail_times` (default: always, when `raise` is given)."""
    record("run", ctx)
    _pause(ctx, float(input.get("sleep", 0)))
    failing = input.get("raise")
    if failing and ctx.attempt <= int(input.get("fail_times", 1_000)):
        if failing == "permanent":
            raise PermanentError(f"malformed on attempt {ctx.attempt} (test)")
        raise TransientError(f"dependency down on attempt {ctx.attempt} (test)")
    return {"n": input.get("n"), "attempt": ctx.attempt}


handler("batch.echo", lease_seconds=30, **_POLICY)(_echo)
# One lease per 0.6 s: the batch heartbeat beats every 0.2 s.
handler("batch.short", lease_seconds=0.6, **_POLICY)(_echo)
# Never packed into a batch message: one message (and one prefork process) per job.
handler("batch.alone", lease_seconds=30, batch=False, **_POLICY)(_echo)
# Caps: the batch claim applies none, so such jobs take the one-job path.
handler("batch.capped", lease_seconds=30, kind_limit=1_000, **_POLICY)(_echo)
# A queue of its own (no test worker consumes it).
handler("batch.elsewhere", lease_seconds=30, queue=OTHER_QUEUE, **_POLICY)(_echo)


@handler("batch.thief", lease_seconds=30, **_POLICY)
def batch_thief(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Another worker takes over the lease of the job `victim` (generation + 1, its own
    owner token), as after an expiry, while this batch still holds its old generation."""
    record("run", ctx)
    taken = Job.objects.filter(pk=input["victim"], state="leased").update(
        generation=F("generation") + 1,
        lease_owner=THIEF,
        lease_until=timezone.now() + timedelta(seconds=120),
    )
    return {"taken": taken}


@handler("batch.effect", lease_seconds=30, **_POLICY)
def batch_effect(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """One external effect through the ledger, then a transient failure while the attempt is
    at most `fail_times` (default 0)."""
    record("run", ctx)

    def call(key: str) -> dict[str, Any]:
        record("effect", ctx)
        return {"key": key}

    notice = ctx.effect("notice", call)
    if ctx.attempt <= int(input.get("fail_times", 0)):
        raise TransientError(f"after the effect, attempt {ctx.attempt} (test)")
    return {"notice": notice}


@handler("batch.local", lease_seconds=30, **_POLICY)
def batch_local(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """A local effect: committed with the completion, in the group commit's savepoint."""
    record("run", ctx)

    def receipt(key: str) -> dict[str, Any]:
        if input.get("broken"):  # runs inside the (group) commit, after the handler returned
            raise TransientError("the receipt table is locked (test)")
        return {"receipt": key}

    ctx.local_effect("receipt", receipt)
    return {"n": input.get("n")}


SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


@handler("batch.strict", lease_seconds=30, input_schema=SCHEMA, **_POLICY)
def batch_strict(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    record("run", ctx)
    return {"n": input["n"]}


@handler("batch.forget", lease_seconds=30, **_POLICY)
def batch_forget(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """The database loses the claim of job `victim` as a failover to a standby that had not
    received it would: the row back to `queued` at the generation before, no owner. A crash
    is not an UPDATE, so the guard triggers (generation never goes down) are bypassed for
    this one statement, as WAL replay would."""
    from django.db import connection

    record("run", ctx)
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            "UPDATE jobs_job SET state = 'queued', generation = generation - 1, "
            "attempt = GREATEST(attempt - 1, 0), lease_owner = NULL, lease_until = NULL "
            "WHERE id = %s",
            [input["victim"]],
        )
        cursor.execute("SET session_replication_role = origin")
    return {"forgot": input["victim"]}
