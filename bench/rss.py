"""Memory over 100,000 jobs: the worker's main process, its pool children and the web-like
submitting process, RSS after a warm-up and at the end (issue 28: at most 10 MB each).

    PYTHONPATH=. .venv/bin/python bench/rss.py [--jobs 100000] [--warmup 10000]

One prefork worker (c=2) as the Procfile runs it, against its own database and a private
Redis; this process submits, as a web server's threads do: 4 threads of single
`jobs.submit` calls and one `jobs.submit_many` producer (groups of 50), paced so the backlog
stays under 4,000 jobs. RSS is read from /proc every 5 s; growth is end minus the sample
taken when `--warmup` jobs had finished.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.infra import Fleet, db_name, db_url, ensure_database, private_redis  # noqa: E402
from demo.procs import child_pids  # noqa: E402

BOUND_MB = 10.0
DB = db_name("rss")


def rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return 0.0
    line = next(x for x in status.splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=10_000)
    args = parser.parse_args()
    ensure_database(DB)
    with private_redis() as redis:
        os.environ.update(
            DATABASE_URL=db_url(DB),
            CELERY_BROKER_URL=redis.url,
            DJANGO_SETTINGS_MODULE="jobsite.settings",
            LOG_LEVEL="WARNING",
        )
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        import jobs
        from jobs.models import Job

        Job.objects.all().delete()
        owner, _ = get_user_model().objects.get_or_create(username="bench-rss")
        fleet = Fleet()
        try:
            env = fleet.env(DATABASE_URL=db_url(DB), CELERY_BROKER_URL=redis.url)
            worker = fleet.celery_worker(
                "rss-worker", app="jobsite", queue="jobs", concurrency=2, env=env
            )
            stop = threading.Event()
            submitted = [0]

            def backlog_ok() -> bool:
                return submitted[0] < args.jobs and not stop.is_set()

            def web() -> None:
                from django.db import connection

                while backlog_ok():
                    jobs.submit(kind="noop", input={}, owner=owner)
                    submitted[0] += 1
                    time.sleep(0.001)
                connection.close()

            def producer() -> None:
                from django.db import connection

                while backlog_ok():
                    jobs.submit_many([{"kind": "noop", "input": {}, "owner": owner}] * 50)
                    submitted[0] += 50
                    while backlog_ok() and Job.objects.filter(state="queued").count() > 4000:
                        time.sleep(0.2)
                connection.close()

            threads = [threading.Thread(target=web, daemon=True) for _ in range(4)]
            threads.append(threading.Thread(target=producer, daemon=True))
            for thread in threads:
                thread.start()
            main_pid, web_pid = worker.pid, os.getpid()
            warm: dict[str, float] = {}
            began = time.monotonic()
            while True:
                done = Job.objects.filter(state="succeeded").count()
                sizes = {"worker main": rss_mb(main_pid), "web-like": rss_mb(web_pid)}
                for n, pid in enumerate(child_pids(main_pid)):
                    sizes[f"worker child {n + 1}"] = rss_mb(pid)
                if not warm and done >= args.warmup:
                    warm = dict(sizes)
                print(
                    f"t={time.monotonic() - began:5.0f}s done={done:7d} "
                    + " ".join(f"{k}={v:.1f}MB" for k, v in sizes.items()),
                    flush=True,
                )
                if done >= args.jobs:
                    break
                time.sleep(5)
            stop.set()
            print(f"\n{args.jobs:,} jobs in {time.monotonic() - began:.0f} s")
            ok = True
            for name, size in sizes.items():
                growth = size - warm.get(name, size)
                verdict = "PASS" if growth <= BOUND_MB else "FAIL"
                ok &= growth <= BOUND_MB
                print(
                    f"{verdict}  {name}: {warm.get(name, 0):.1f} MB after {args.warmup:,} jobs, "
                    f"{size:.1f} MB after {args.jobs:,}: {growth:+.1f} MB (bound {BOUND_MB:g})"
                )
            return 0 if ok else 1
        finally:
            fleet.close()


if __name__ == "__main__":
    sys.exit(main())
