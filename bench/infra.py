"""Benchmark plumbing: bench databases, a private Redis, worker subprocesses, counters."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

from demo.procs import celery_beat_argv, celery_worker_argv
from tests.harness import PrivateRedis, Proc, wait_until

ROOT = Path(__file__).resolve().parent.parent
PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "dj_bench_")

__all__ = ["PrivateRedis", "Proc", "wait_until"]


def db_name(suffix: str) -> str:
    return f"{DB_PREFIX}{suffix}"


def db_url(name: str) -> str:
    return f"postgres://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"


def pg_connect(name: str = "postgres", *, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=name, autocommit=autocommit
    )


def ensure_database(name: str, *, migrate: bool = True) -> None:
    """Create the bench database if missing and bring its schema up to date."""
    with pg_connect() as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')  # name is ours: prefix + fixed suffix
        # Django's advice ("Optimizing PostgreSQL's configuration"): with the session time zone
        # already UTC, a new connection skips its `SET TIME ZONE` (a round trip and a commit).
        # Every contender's database gets it, Procrastinate's too.
        conn.execute(f"ALTER DATABASE \"{name}\" SET timezone = 'UTC'")
    if migrate:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": db_url(name), "PYTHONPATH": str(ROOT)},
            check=True,
            timeout=300,
        )


def xact_commits(name: str) -> int:
    """pg_stat_database.xact_commit of one database, read from the `postgres` database."""
    with pg_connect() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
    return int(row[0]) if row else 0


def vacuum(name: str) -> None:
    """VACUUM (ANALYZE) a bench database, as autovacuum would between bursts.

    This machine's PostgreSQL runs with autovacuum off; without this, dead row versions of
    earlier rounds pile up and every contender that updates rows slows down run by run. Call
    it before a block's commit counter is read: its own transactions are not the jobs'."""
    with pg_connect(name) as conn:
        conn.execute("VACUUM (ANALYZE)")


def settled_commits(name: str, *, timeout: float = 20.0) -> int:
    """xact_commit once no backend of `name` is left and the counter stopped moving.

    Backends flush their statistics when they exit (or up to 10 s later when idle), so we
    read only after every connection to the database is gone.
    """

    def no_backends() -> bool:
        with pg_connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]
            ).fetchone()
        return row is not None and int(row[0]) == 0

    wait_until(no_backends, timeout=timeout, interval=0.1, what=f"backends of {name} to exit")
    seen = [xact_commits(name)]

    def stable() -> bool:
        # Unchanged over three reads, 0.5 s apart: exiting backends have flushed.
        seen.append(xact_commits(name))
        return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    wait_until(stable, timeout=timeout, interval=0.5, what=f"xact_commit of {name} to settle")
    return seen[-1]


class RedisCounters:
    """Commands processed, publishes (LPUSH) and acks (HDEL on kombu's `unacked` hash) on
    the private Redis."""

    def __init__(self, port: int) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=port)
        self.info_calls = 0

    def commands(self) -> int:
        self.info_calls += 1
        return int(self.client.info("stats")["total_commands_processed"])

    def acks(self) -> int:
        self.info_calls += 1
        stats = self.client.info("commandstats")
        return int(stats.get("cmdstat_hdel", {}).get("calls", 0))

    def publishes(self) -> int:
        """Messages published so far: kombu's Redis transport LPUSHes each one."""
        self.info_calls += 1
        stats = self.client.info("commandstats")
        return int(stats.get("cmdstat_lpush", {}).get("calls", 0))

    def flush(self) -> None:
        self.client.flushall()


@dataclass
class Fleet:
    """Every subprocess a benchmark started; stopped by pid, always."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dj-bench-")))
    procs: list[Proc] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "PYTHONPATH": str(ROOT),
                "DJANGO_SETTINGS_MODULE": "jobsite.settings",
                "PYTHONUNBUFFERED": "1",
                "CELERY_WORKER_SEND_TASK_EVENTS": "0",
                "LOG_LEVEL": "WARNING",
            }
        )
        env.update(extra)
        return env

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log_path = self.workdir / f"{name}.log"
        handle = open(log_path, "ab")  # noqa: SIM115 - the child owns it
        popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
        handle.close()
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def celery_beat(self, name: str, *, env: dict[str, str]) -> Proc:
        return self.spawn(name, celery_beat_argv(self.workdir, name), env)

    def celery_worker(
        self, name: str, *, app: str, queue: str, concurrency: int, env: dict[str, str]
    ) -> Proc:
        argv = celery_worker_argv(name, app=app, queues=queue, concurrency=concurrency)
        proc = self.spawn(name, argv, env)
        wait_until(
            lambda: "ready." in proc.log() or not proc.alive(),
            timeout=90,
            what=f"worker {name} to be ready",
        )
        if not proc.alive():
            raise RuntimeError(f"worker {name} died at start:\n{proc.log()[-3000:]}")
        return proc

    def stop(self, proc: Proc) -> None:
        proc.stop(timeout=20)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.procs)):
            self.stop(proc)

    def close(self) -> None:
        self.stop_all()
        if not os.environ.get("BENCH_KEEP_LOGS"):
            shutil.rmtree(self.workdir, ignore_errors=True)


@contextlib.contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def poll(condition: Callable[[], bool], *, timeout: float, interval: float, what: str) -> float:
    """wait_until, returning the perf_counter time at which the condition first held."""
    wait_until(condition, timeout=timeout, interval=interval, what=what)
    return time.perf_counter()


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    with pg_connect() as conn:
        row = conn.execute("SHOW server_version").fetchone()
        pg_version = str(row[0]) if row else "?"
    redis_version = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [shutil.which("redis-server") or "redis-server", "--version"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        redis_version = out.split("v=")[1].split()[0] if "v=" in out else out.strip()
    from importlib.metadata import version

    import celery
    import django

    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "memory": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "postgresql": pg_version,
        "redis": redis_version,
        "django": django.get_version(),
        "celery": celery.__version__,
        "procrastinate": version("procrastinate"),
        "load_at_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
