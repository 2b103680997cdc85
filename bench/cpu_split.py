"""CPU milliseconds per job, split by process: where an end-to-end job spends the machine.

Run it with `python bench/run_all.py --only cpu` (`--jobs 200` measures 1,000 jobs each).

Throughput on a 2-core machine is bounded by the CPU every process spends per job: the
submitting driver, the worker processes, PostgreSQL's backends and Redis. This prints that
split for each contender, from /proc (utime + stime, children included), measured over one
round of no-op jobs after a warm-up. PostgreSQL is the on-CPU time of the backends serving
the contender's own database (bench/pgcpu.py): the server is shared with test runs. The
batch path's rows (the backlog drain) are measured by bench/backlog.py the same way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.pgcpu import PgCpuMeter

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()


def proc_cpu(pid: int, *, with_reaped: bool = False) -> float:
    """CPU seconds of one process (and of its reaped children, if asked)."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    if with_reaped:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields and int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def tree_cpu(pid: int) -> float:
    """A process and its live descendants (reaped ones count in their parent's c-times)."""
    total = proc_cpu(pid, with_reaped=True)
    for child in children(pid):
        total += tree_cpu(child)
    return total


def driver_cpu() -> float:
    t = os.times()
    return t.user + t.system


def snapshot(worker_pids: list[int], redis_pid: int) -> dict[str, float]:
    """CPU seconds so far of every process that serves the jobs, but PostgreSQL."""
    return {
        "driver": driver_cpu(),
        "worker_main": sum(proc_cpu(p) for p in worker_pids),
        "worker": sum(tree_cpu(p) for p in worker_pids),
        "redis": proc_cpu(redis_pid),
    }


def measure(
    name: str,
    n: int,
    run: Callable[[int], Any],
    worker_pids: list[int],
    redis_pid: int,
    *,
    dbs: list[str],
    exclude: set[int] | None = None,
) -> dict[str, float]:
    """CPU ms per job of `run(n)` by process; PostgreSQL: the backends of `dbs` alone
    (bench/pgcpu.py), since the server is shared with test runs."""
    meter = PgCpuMeter(dbs, exclude=exclude).start()
    before = snapshot(worker_pids, redis_pid)
    wall = time.perf_counter()
    result = run(n)
    wall = time.perf_counter() - wall
    after = snapshot(worker_pids, redis_pid)
    postgres_ms = meter.stop()
    split = {k: (after[k] - before[k]) * 1000 / n for k in before}
    split["driver"] -= meter.own_cpu_s * 1000 / n
    split["postgres"] = postgres_ms / n
    split["total"] = sum(v for k, v in split.items() if k != "worker_main")
    split["jobs_per_s"] = n / wall
    if getattr(result, "messages", 0):
        split["jobs_per_message"] = n / result.messages
    cells = "  ".join(f"{k} {v:6.2f}" for k, v in split.items() if k != "jobs_per_s")
    print(f"{name:14s} {split['jobs_per_s']:7.1f} jobs/s   CPU ms/job: {cells}", flush=True)
    return split


def scenario_cpu(b: Any) -> dict[str, Any]:
    """CPU per job by process for each contender, one worker process each, `5 x --jobs` jobs
    after a 50-job warm-up (the database vacuumed in between)."""
    from bench import scenarios
    from bench.infra import db_name, vacuum
    from outbox.conf import outbox_settings

    assert b.redis.proc is not None
    redis_pid = b.redis.proc.pid
    n = 5 * b.jobs
    main_db = db_name("main")
    out: dict[str, Any] = {"jobs": n, "concurrency": 1, "submitters": b.submitters}

    scenarios.use_target(main_db, b.broker())
    owner = scenarios.bench_owner()
    w = scenarios.durable_worker(b, "cpu_durable", 1, main_db)
    try:

        def durable(k: int) -> Any:
            return scenarios.broker_round(b, "durable", k, lambda: scenarios.durable_submit(owner))

        durable(50)
        scenarios.close_driver_db()
        vacuum(main_db)
        out["durable"] = measure("durable", n, durable, [w.popen.pid], redis_pid, dbs=[main_db])
        # The same with every job in a message of its own: the fast path packs rows that
        # commit while a publish is in flight, so 4 submitting threads share messages.
        batch_max = outbox_settings.BATCH_MAX
        scenarios.set_setting("OUTBOX_BATCH_MAX", 1)
        try:
            scenarios.close_driver_db()
            vacuum(main_db)
            out["durable_alone"] = measure(
                "durable_alone", n, durable, [w.popen.pid], redis_pid, dbs=[main_db]
            )
        finally:
            scenarios.set_setting("OUTBOX_BATCH_MAX", batch_max)
    finally:
        b.fleet.stop(w)

    w = scenarios.raw_worker(b, 1)
    try:

        def raw(k: int) -> Any:
            return scenarios.broker_round(b, "raw_celery", k, scenarios.raw_submit)

        raw(50)
        out["raw_celery"] = measure("raw_celery", n, raw, [w.popen.pid], redis_pid, dbs=[])
    finally:
        b.fleet.stop(w)

    pdb = db_name("procrastinate")
    scenarios.ensure_procrastinate_schema(pdb)
    proc = scenarios.ProcrastinateDriver(pdb)
    w = scenarios.procrastinate_worker(b, pdb, 1)
    proc.open()
    try:

        def procrastinate(k: int) -> Any:
            return proc.round(k, b.submitters)

        procrastinate(50)
        vacuum(pdb)
        out["procrastinate"] = measure(
            "procrastinate",
            n,
            procrastinate,
            [w.popen.pid],
            redis_pid,
            dbs=[pdb],
            exclude={proc.conn.info.backend_pid},  # our count(*) polls
        )
    finally:
        b.fleet.stop(w)
        proc.close()
    return out
