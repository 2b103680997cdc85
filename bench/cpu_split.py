"""CPU milliseconds per job, split by process: where an end-to-end job spends the machine.

Usage: PYTHONPATH=. python bench/cpu_split.py [--jobs 1000] [--concurrency 1] [--submitters 4]
                                             [--only durable,raw_celery,procrastinate]

Throughput on a 2-core machine is bounded by the CPU every process spends per job: the
submitting driver, the worker processes, PostgreSQL's backends and Redis. This prints that
split for each contender, from /proc (utime + stime, children included), measured over one
round of `--jobs` no-op jobs after a warm-up. Prints only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

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


def postgres_cpu() -> float:
    """Every PostgreSQL process of the machine (the postmaster's c-times hold exited backends)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm == "postgres" or comm.startswith("postgres"):
            fields = _stat(int(entry.name))
            if fields is None:
                continue
            parent_comm = ""
            with contextlib.suppress(OSError):
                parent_comm = Path(f"/proc/{fields[1]}/comm").read_text().strip()
            total += proc_cpu(int(entry.name), with_reaped=not parent_comm.startswith("postgres"))
    return total


def driver_cpu() -> float:
    t = os.times()
    return t.user + t.system


def measure(
    name: str, n: int, run: Callable[[int], Any], worker_pids: list[int], redis_pid: int
) -> dict[str, float]:
    before = {
        "driver": driver_cpu(),
        "worker_main": sum(proc_cpu(p) for p in worker_pids),
        "worker": sum(tree_cpu(p) for p in worker_pids),
        "postgres": postgres_cpu(),
        "redis": proc_cpu(redis_pid),
    }
    wall = time.perf_counter()
    run(n)
    wall = time.perf_counter() - wall
    after = {
        "driver": driver_cpu(),
        "worker_main": sum(proc_cpu(p) for p in worker_pids),
        "worker": sum(tree_cpu(p) for p in worker_pids),
        "postgres": postgres_cpu(),
        "redis": proc_cpu(redis_pid),
    }
    split = {k: (after[k] - before[k]) * 1000 / n for k in before}
    split["total"] = sum(v for k, v in split.items() if k != "worker_main")
    split["jobs_per_s"] = n / wall
    cells = "  ".join(f"{k} {v:6.2f}" for k, v in split.items() if k != "jobs_per_s")
    print(f"{name:14s} {split['jobs_per_s']:7.1f} jobs/s   CPU ms/job: {cells}", flush=True)
    return split


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--submitters", type=int, default=4)
    parser.add_argument("--only", default="durable,raw_celery,procrastinate")
    args = parser.parse_args(argv)
    wanted = [s.strip() for s in args.only.split(",") if s.strip()]

    from bench.infra import (
        Fleet,
        RedisCounters,
        db_name,
        db_url,
        ensure_database,
        private_redis,
        vacuum,
    )

    main_db = db_name("main")
    ensure_database(main_db)
    with private_redis() as server:
        os.environ["DATABASE_URL"] = db_url(main_db)
        os.environ["CELERY_BROKER_URL"] = f"redis://127.0.0.1:{server.port}/0"
        os.environ["BENCH_BROKER_URL"] = os.environ["CELERY_BROKER_URL"]
        os.environ["CELERY_WORKER_SEND_TASK_EVENTS"] = "0"
        os.environ["LOG_LEVEL"] = "WARNING"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
        import django

        django.setup()
        from bench import scenarios

        fleet = Fleet()
        b = scenarios.Bench(
            redis=server,
            counters=RedisCounters(server.port),
            fleet=fleet,
            jobs=args.jobs,
            rounds=1,
            submitters=args.submitters,
            concurrencies=[args.concurrency],
            quick=False,
        )
        assert server.proc is not None
        redis_pid = server.proc.pid
        c = args.concurrency
        try:
            if "durable" in wanted:
                scenarios.use_target(main_db, b.broker())
                owner = scenarios.bench_owner()
                w = scenarios.durable_worker(b, "durable", c, main_db)

                def durable(n: int) -> Any:
                    return scenarios.broker_round(
                        b, "durable", n, lambda: scenarios.durable_submit(owner)
                    )

                durable(50)
                vacuum(main_db)
                measure("durable", args.jobs, durable, [w.popen.pid], redis_pid)
                fleet.stop(w)
            if "raw_celery" in wanted:
                w = scenarios.raw_worker(b, c)

                def raw(n: int) -> Any:
                    return scenarios.broker_round(b, "raw", n, scenarios.raw_submit)

                raw(50)
                measure("raw_celery", args.jobs, raw, [w.popen.pid], redis_pid)
                fleet.stop(w)
            if "procrastinate" in wanted:
                pdb = db_name("procrastinate")
                scenarios.ensure_procrastinate_schema(pdb)
                proc = scenarios.ProcrastinateDriver(pdb)
                w = scenarios.procrastinate_worker(b, pdb, c)
                proc.open()
                time.sleep(1.0)  # its worker has no ready line; it polls and listens

                def procr(n: int) -> Any:
                    return proc.round(n, args.submitters)

                procr(50)
                vacuum(pdb)
                measure("procrastinate", args.jobs, procr, [w.popen.pid], redis_pid)
                fleet.stop(w)
                proc.close()
        finally:
            fleet.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
