"""Cost of one redelivery check (jobs.ops.redeliver.redeliver_run) at 1M finished rows.

Usage: python bench/redeliver_cost.py [--rows 1000000] [--backlog 10000] [--runs 50]

Its own database (BENCH_DB_PREFIX + "redeliver", kept between runs) is filled once with a
bulk INSERT ... SELECT generate_series: `--rows` succeeded jobs, each with its published
outbox row (the pruner keeps published rows a week); then, per case, the due rows are
reset and the check is timed `--runs` times (median and p95 of the whole run, its
transaction included) and its queries are shown with EXPLAIN ANALYZE:
  idle     - nothing due;
  backlog  - `--backlog` jobs queued 30 s ago, published, one job leased and 600 finished in
             the last minute (10/s): an honest drain of `backlog / 10` seconds, not lost;
  tail     - the same backlog at the tail of a drain (module text at the case): one window;
  lost     - 100 jobs whose messages were published 60 s ago in an idle system: the first
             run republishes them all (timed alone), the next finds nothing.
A private redis-server takes the republished messages.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.infra import db_name, db_url, ensure_database, pg_connect, private_redis  # noqa: E402

FILL_JOBS = """
INSERT INTO jobs_job (
    id, kind, kind_version, input_version, request_fingerprint, input, state, attempt,
    max_attempts, generation, lease_owner, result, error_category, error_message,
    created_at, updated_at, started_at, finished_at, next_attempt_at, deadline, owner_id)
SELECT gen_random_uuid(), 'noop', 1, 1, md5(g::text), '{}'::jsonb, 'succeeded', 1, 3, 1,
       'bench-fill', '{}'::jsonb, '', '', t, t, t, t + interval '5 ms', t, NULL, %(owner)s
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT now() - interval '2 days' + make_interval(secs => g * 0.1) AS t) AS ts
"""
FILL_OUTBOX = """
INSERT INTO outbox_outboxentry (
    task_name, queue, job_id, kwargs, available_at, published_at, publish_attempts,
    last_error, created_at)
SELECT 'jobs.execute', 'jobs', j.id,
       jsonb_build_object('job_id', j.id::text, 'generation', 0, 'kind', 'noop',
                          'kind_version', 1),
       j.created_at, j.created_at + interval '1 ms', 1, '', j.created_at
FROM jobs_job j
WHERE NOT EXISTS (SELECT 1 FROM outbox_outboxentry e WHERE e.job_id = j.id)
"""
CASE_JOBS = """
WITH new AS (
    INSERT INTO jobs_job (
        id, kind, kind_version, input_version, request_fingerprint, input, state, attempt,
        max_attempts, generation, result, error_category, error_message,
        created_at, updated_at, next_attempt_at, owner_id)
    SELECT gen_random_uuid(), 'noop', 1, 1, 'case' || g, '{}'::jsonb, 'queued', 0, 3, 0,
           NULL, '', '', now() - %(ago)s * interval '1 s', now(),
           now() - %(ago)s * interval '1 s', %(owner)s
    FROM generate_series(1, %(n)s) AS g
    RETURNING id, created_at)
INSERT INTO outbox_outboxentry (
    task_name, queue, job_id, kwargs, available_at, published_at, publish_attempts,
    last_error, created_at)
SELECT 'jobs.execute', 'jobs', id,
       jsonb_build_object('job_id', id::text, 'generation', 0, 'kind', 'noop',
                          'kind_version', 1),
       created_at, created_at, 1, '', created_at
FROM new
"""


def _fill(db: str, rows: int, owner: int) -> None:
    with pg_connect(db) as conn:
        have = conn.execute("SELECT count(*) FROM jobs_job WHERE state = 'succeeded'").fetchone()
        if have and have[0] < rows:
            print(f"filling {db}: {have[0]} -> {rows} finished jobs", flush=True)
            conn.execute(FILL_JOBS, {"owner": owner, "n": rows - have[0]})
            conn.execute(FILL_OUTBOX)
        conn.execute("VACUUM ANALYZE jobs_job")
        conn.execute("VACUUM ANALYZE outbox_outboxentry")


def _reset(db: str, rows: int) -> None:
    """Drop every row a case added (the fill's rows are the first `rows` succeeded ones)."""
    with pg_connect(db) as conn:
        added = "SELECT id FROM jobs_job WHERE request_fingerprint LIKE 'case%%'"
        conn.execute(f"DELETE FROM jobs_jobevent WHERE job_id IN ({added})")
        conn.execute(f"DELETE FROM outbox_outboxentry WHERE job_id IN ({added})")
        conn.execute("DELETE FROM jobs_job WHERE request_fingerprint LIKE 'case%%'")
        conn.execute("DELETE FROM jobs_drainsample")
        conn.execute("DELETE FROM jobs_workerheartbeat")
        conn.execute(
            "INSERT INTO jobs_workerheartbeat (name, hostname, pid, started_at, seen_at) "
            "VALUES ('bench@host', 'host', 1, now(), now() + interval '1 hour')"
        )


def _add_case_jobs(db: str, owner: int, *, n: int, ago: float) -> None:
    with pg_connect(db) as conn:
        conn.execute(CASE_JOBS, {"owner": owner, "n": n, "ago": ago})
        conn.execute("ANALYZE jobs_job")


def _busy(db: str, owner: int, *, finished: int = 600) -> None:
    """One leased job and `finished` completions in the last minute (600: 10 per second)."""
    _add_case_jobs(db, owner, n=finished + 1, ago=50)
    with pg_connect(db) as conn:
        ids = "SELECT id FROM jobs_job WHERE request_fingerprint LIKE 'case%%' AND state = 'queued'"
        conn.execute(
            f"UPDATE jobs_job SET state = 'leased', generation = 1, attempt = 1, "
            f"lease_owner = 'bench', lease_until = now() + interval '1 hour' WHERE id IN ({ids})"
        )
        conn.execute(
            "UPDATE jobs_job SET state = 'succeeded', result = '{}', "
            "finished_at = now() - random() * 50 * interval '1 s' WHERE id IN ("
            "SELECT id FROM jobs_job WHERE request_fingerprint LIKE 'case%%' LIMIT %s)",
            [finished],
        )
        conn.execute("ANALYZE jobs_job")


def _timed(runs: int) -> tuple[list[float], Any]:
    from jobs.ops.redeliver import redeliver_run

    took, last = [], None
    for _ in range(runs):
        started = time.perf_counter()
        last = redeliver_run()
        took.append((time.perf_counter() - started) * 1000)
    return took, last


def _explain(db: str) -> None:
    """EXPLAIN ANALYZE of the check's queries, as Django sends them."""
    from django.db import connection
    from django.utils import timezone

    from jobs.ops import redeliver

    now = timezone.now()
    rule = redeliver.DeadlineRule.from_settings()
    with connection.execute_wrapper(_explain_each):
        redeliver.drain_measure(now, rule)
        window, _ = redeliver.due_window(due_before=now, after=None, limit=2000)
        redeliver.undelivered_candidates(job_ids=window, published_before=now)


def _explain_each(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    if sql.lstrip().upper().startswith("SELECT"):
        cursor = context["cursor"]
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
        plan = "\n    ".join(row[0] for row in cursor.fetchall())
        print(f"  {sql[:100]}...\n    {plan}", flush=True)
    return execute(sql, params, many, context)


def _report(case: str, took: list[float], result: Any) -> None:
    p95 = statistics.quantiles(took, n=20)[-1] if len(took) >= 2 else took[0]
    print(
        f"{case:8s} runs={len(took):3d} median={statistics.median(took):7.2f} ms "
        f"p95={p95:7.2f} ms  last: {result.as_dict()}",
        flush=True,
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--explain", action="store_true", help="print the query plans")
    args = parser.parse_args(argv)
    db = db_name("redeliver")
    ensure_database(db)
    with private_redis() as redis_server:
        os.environ.update(
            DATABASE_URL=db_url(db),
            CELERY_BROKER_URL=redis_server.url,
            DJANGO_SETTINGS_MODULE="jobsite.settings",
        )
        import django

        django.setup()
        from django.contrib.auth import get_user_model

        owner = get_user_model().objects.get_or_create(username="bench")[0].pk
        _fill(db, args.rows, owner)
        with pg_connect(db) as conn:
            count = conn.execute("SELECT count(*) FROM jobs_job").fetchone()
        print(f"jobs_job rows: {count[0] if count else 0}", flush=True)

        _reset(db, args.rows)
        _report("idle", *_timed(args.runs))
        if args.explain:
            _explain(db)

        _reset(db, args.rows)
        _busy(db, owner)
        _add_case_jobs(db, owner, n=args.backlog, ago=30)
        _report("backlog", *_timed(args.runs))
        if args.explain:
            _explain(db)

        # The tail of a drain: 40,000 completions in the last minute (800/s), so the backlog
        # needs 12.5 s now, but the history says it joined a 1,000 s drain 60 s ago: none is late.
        # Every row is older than the shortest deadline (25 s), so each run looks at one
        # window (4 x JOBS_REDELIVER_BATCH rows): the check's largest cost per run.
        _reset(db, args.rows)
        _busy(db, owner, finished=40_000)
        _add_case_jobs(db, owner, n=args.backlog, ago=60)
        with pg_connect(db) as conn:
            conn.execute(
                "INSERT INTO jobs_drainsample (taken_at, backlog, drain_rate, wait_seconds) "
                "SELECT now() - g * interval '2 s', 0, 0, 1000 FROM generate_series(1, 35) g"
            )
        _report("tail", *_timed(args.runs))
        if args.explain:
            _explain(db)

        _reset(db, args.rows)
        _add_case_jobs(db, owner, n=100, ago=60)
        _report("lost", *_timed(1))
        _report("after", *_timed(args.runs))
        _reset(db, args.rows)


if __name__ == "__main__":
    main(sys.argv[1:])
