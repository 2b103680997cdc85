"""Test-only kinds for follow-ups (`ctx.submit`) and fan-in (`after=`), on both paths.

The test process imports this module so `jobs.submit` and in-process runs know the kinds;
workers load it through env JOBS_HANDLER_MODULES=tests.kinds_links.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone

from jobs.context import JobContext
from jobs.exceptions import PermanentError
from jobs.models import Job
from jobs.registry import handler

_POLICY: dict[str, Any] = {"max_attempts": 3, "max_elapsed": 600, "base_delay": 0.05}


def _fan_out(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """`n` children, then (with `join`) one `links.join` after all of them; `fail`: raise
    after asking, so nothing may be written."""
    children = [ctx.submit("links.leaf", {"i": i}) for i in range(int(input["n"]))]
    join = ctx.submit("links.join", {}, after=children) if input.get("join") else None
    if input.get("fail"):
        raise PermanentError("failed after asking for follow-ups")
    return {"children": [str(c) for c in children], "join": str(join) if join else None}


handler("links.fan_out", lease_seconds=30, batch=False, **_POLICY)(_fan_out)
handler("links.fan_out_batched", lease_seconds=30, **_POLICY)(_fan_out)


@handler("links.leaf", lease_seconds=30, **_POLICY)
def leaf(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    if input.get("fail"):
        raise PermanentError("leaf told to fail")
    return {"i": input.get("i")}


@handler("links.join", lease_seconds=30, **_POLICY)
def join(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """What it saw of its dependencies."""
    return {
        "dependencies": [
            {"id": str(d.id), "kind": d.kind, "state": d.state, "result": d.result}
            for d in ctx.dependencies()
        ]
    }


THIEF = "links-test-thief"


@handler("links.stolen", lease_seconds=30, **_POLICY)
def stolen(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Asks for a follow-up, then another worker takes the lease over (as after an expiry):
    its success is fenced out, and so is the follow-up."""
    ctx.submit("links.leaf", {"from": "stale"})
    Job.objects.filter(pk=ctx.job_id, state="leased").update(
        generation=F("generation") + 1,
        lease_owner=THIEF,
        lease_until=timezone.now() + timedelta(seconds=120),
    )
    return {}
