"""Test-only kinds for ordering and fairness (workers load them via JOBS_HANDLER_MODULES)."""

from __future__ import annotations

import time
from typing import Any

from jobs.context import JobContext
from jobs.registry import handler


@handler("ordering.work", max_attempts=3, lease_seconds=10)
def ordering_work(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(input.get("seconds", 0.1)))
    return {"n": input.get("n")}


@handler("fair.work", max_attempts=3, lease_seconds=10, tenant_limit=1)
def fair_work(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(input.get("seconds", 1.0)))
    return {"n": input.get("n")}


@handler("quota.work", max_attempts=3, lease_seconds=10, kind_limit=2)
def quota_work(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(input.get("seconds", 0.3)))
    return {"n": input.get("n")}
