"""The database calls of one durable job, one at a time: what PostgreSQL spends on each.

Run it with `python bench/run_all.py --only calls,cpu` (`--jobs 200` measures 1,000 jobs).

A durable no-op job makes four database calls: the accept (job, JobEvent and outbox row in
one statement), the fast path's mark after the publish, the claim and the completion. This
makes each call `5 x --jobs` times in a row from the driver, with no worker and no broker,
and reads the on-CPU time of the PostgreSQL backend serving it (/proc/PID/schedstat) and of
the driver, per call, as the median of five chunks. No other load runs, so these are the
cheapest the calls get on this machine.

With table 4b's raw Celery CPU per job from the same run, they give a ceiling: a durable job
does everything a raw Celery job does (publish, deliver, ack) plus these four calls, so even
if durable-jobs' own Python cost nothing, throughput on a CPU-bound machine could be at most
raw / (raw + PostgreSQL) of raw Celery's.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

CALLS = ("accept", "mark", "claim", "complete")


CHUNKS = 5  # each call's cost is the median over chunks: a checkpoint's full-page writes
# land in one chunk, not in the figure


def _backend_pid() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _oncpu(pid: int) -> float:
    """Seconds a process has run on a CPU (/proc/PID/schedstat: nanoseconds, not ticks)."""
    with open(f"/proc/{pid}/schedstat") as handle:
        return int(handle.read().split()[0]) / 1e9


def _measure(
    name: str, fn: Callable[[Any], Any], items: Iterable[Any]
) -> tuple[dict[str, float], list[Any]]:
    items = list(items)
    pid = _backend_pid()
    size = max(1, len(items) // CHUNKS)
    chunks = [items[i : i + size] for i in range(0, len(items), size)]
    samples: dict[str, list[float]] = {"postgres_ms": [], "driver_ms": [], "wall_ms": []}
    out: list[Any] = []
    for chunk in chunks:
        pg0, py0, wall0 = _oncpu(pid), time.process_time(), time.perf_counter()
        out.extend(fn(item) for item in chunk)
        pg1, py1, wall1 = _oncpu(pid), time.process_time(), time.perf_counter()
        samples["postgres_ms"].append((pg1 - pg0) * 1000 / len(chunk))
        samples["driver_ms"].append((py1 - py0) * 1000 / len(chunk))
        samples["wall_ms"].append((wall1 - wall0) * 1000 / len(chunk))
    if _backend_pid() != pid:
        raise RuntimeError(f"{name}: the connection changed mid-measure; the numbers are void")
    row = {key: statistics.median(values) for key, values in samples.items()}
    print(
        f"  {name:9s} PostgreSQL {row['postgres_ms']:6.3f} ms  driver {row['driver_ms']:6.3f} ms"
        f"  wall {row['wall_ms']:6.3f} ms",
        flush=True,
    )
    return row, out


def scenario_calls(b: Any) -> dict[str, Any]:
    """Each of a durable job's database calls, `5 x --jobs` times, on a vacuumed database."""
    import jobs
    from bench import scenarios
    from bench.infra import db_name, vacuum
    from jobs import lifecycle
    from jobs.claims import job_claim_id
    from outbox.conf import outbox_settings
    from outbox.marks import outbox_mark_published
    from outbox.models import OutboxEntry

    n = 5 * b.jobs
    main_db = db_name("main")
    scenarios.use_target(main_db, b.broker())
    owner = scenarios.bench_owner()
    scenarios.close_driver_db()
    vacuum(main_db)
    fast_path = outbox_settings.FAST_PATH
    scenarios.set_fast_path(False)  # the accept alone: no publish, no mark
    try:
        for _ in range(20):  # warm: connection, compiled statements, plan caches
            jobs.submit(kind="noop", input={}, owner=owner)
        out: dict[str, Any] = {"calls": n}
        out["accept"], ids = _measure(
            "accept", lambda _: jobs.submit(kind="noop", input={}, owner=owner).pk, range(n)
        )
    finally:
        scenarios.set_fast_path(fast_path)
    rows = dict(OutboxEntry.objects.filter(job_id__in=ids).values_list("job_id", "id"))
    out["mark"], _ = _measure("mark", lambda job_id: outbox_mark_published([rows[job_id]]), ids)
    worker = f"bench-calls:{os.getpid()}"
    out["claim"], claims = _measure(
        "claim",
        lambda job_id: job_claim_id(job_id, worker=worker, kind="noop", kind_version=1),
        ids,
    )
    leases = [c.lease for c in claims]
    if any(lease is None for lease in leases):
        raise RuntimeError("calls: a claim did not claim; the database is not clean")
    out["complete"], _ = _measure(
        "complete",
        lambda lease: lifecycle.job_complete(lease, result={}, local_effects=[]),
        leases,
    )
    for key in ("postgres_ms", "driver_ms", "wall_ms"):
        out[f"total_{key}"] = sum(out[c][key] for c in CALLS)
    scenarios.close_driver_db()
    return out


def ceilings(calls: dict[str, Any], cpu: dict[str, Any]) -> dict[str, float]:
    """The best durable / raw Celery and durable / Procrastinate ratios these calls allow,
    if durable-jobs' own Python cost nothing (CPU-bound: throughput ~ 1 / CPU per job)."""
    raw = cpu["raw_celery"]["total"]
    floor = raw + calls["total_postgres_ms"]
    out = {"floor_ms": floor, "vs_raw": raw / floor}
    if "procrastinate" in cpu:
        out["vs_procrastinate"] = cpu["procrastinate"]["total"] / floor
    return out
