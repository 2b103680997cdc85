"""Where a single submit's database time goes (issue 28): `run_all.py --only statements`.

The e2e shape (no-op jobs submitted one call at a time from the driver's threads, a prefork
worker consuming while they submit) on a private PostgreSQL cluster of its own that loads
`pg_stat_statements`, with fsync and full-page writes on as a production server has them.
Rounds alternate between statement tracking off and `pg_stat_statements.track = all`:

- the untracked rounds give PostgreSQL's CPU per job, as section 3-4 measures it (the on-CPU
  time of the database's backends, bench/pgcpu.py) but without the tracking's own cost;
- the tracked rounds give each statement's calls and time per job, top-level (what the
  processes send) and nested (what the PL/pgSQL functions run inside them), and the WAL
  each writes. What the backends spend outside every statement's execution (parse, bind,
  commit, the protocol) is their CPU less the top-level statements' time.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import defaultdict
from typing import Any

import psycopg

from bench.infra import median
from bench.pgcpu import PgCpuMeter
from bench.scenarios import (
    Bench,
    bench_owner,
    broker_round,
    close_driver_db,
    durable_submit,
    log,
    use_target,
)
from bench.soak_probe import server_settings
from outbox import marks
from tests.chaos.private_pg import PrivatePostgres

DB = "dj_bench_statements"
SERVER = {
    "shared_preload_libraries": "pg_stat_statements",
    "fsync": "on",  # the private cluster's default is off (made for crash tests)
    "full_page_writes": "on",
}
READ = """
SELECT s.toplevel, s.queryid, s.query, s.calls, s.total_exec_time, s.total_plan_time, s.rows,
       s.wal_bytes
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = %s
"""


def label(query: str) -> str:
    """A statement's name in the table: the durable-jobs function it calls, or its verbs and
    the durable-jobs tables it names."""
    text = " ".join(query.split())
    called = re.search(
        r"\b(?:SELECT|FROM|PERFORM)\s+(?:\*\s+FROM\s+)?((?:jobs|outbox)_[a-z_]+)\(", text
    )
    if called:
        return f"{called.group(1)}()"
    named = re.findall(
        r'\b(?:FROM|INTO|UPDATE|JOIN)\s+(?:ONLY\s+)?(?:"?public"?\.)?"?(\w+)"?', text
    )
    # Tables, as Django and our SQL name them (app_model); not unnest(), a CTE or SET.
    tables = list(dict.fromkeys(t for t in named if re.fullmatch(r"[a-z]+_[a-z_]+", t)))
    if text.startswith("SELECT 1 FROM ONLY") and "FOR KEY SHARE" in text and tables:
        return f"foreign key check on {tables[0]}"  # a referencing row's insert (RI trigger)
    if not tables and (other := re.match(r"SELECT (\w+)\(", text)):
        return f"{other.group(1)}()"
    verbs = [v for v in ("INSERT", "UPDATE", "DELETE", "SELECT") if re.search(rf"\b{v}\b", text)]
    name = f"{'/'.join(verbs[:2]) or text[:20]} {', '.join(tables[:3])}".strip()
    # A function's statement with named parts says which function it is (claimed, ...).
    parts = re.findall(r"(?:\bWITH|,)\s+(\w+)\s+AS\s+(?:MATERIALIZED\s+)?\(", text)
    parts = [p for p in parts if not re.fullmatch(r"r\d+", p)]  # jobs.inserts' r0, r1
    return f"{name} (WITH {', '.join(parts)})" if parts else name


class Server:
    """The private cluster: created, configured and removed with the scenario."""

    def __init__(self) -> None:
        self.pg = PrivatePostgres(dbname=DB)

    def __enter__(self) -> Server:
        try:
            self.pg.init()
            for name, value in SERVER.items():
                self.pg.psql(f"ALTER SYSTEM SET {name} = '{value}'")
            self.pg.restart(mode="fast")  # shared_preload_libraries needs a start
            with self.connect(DB) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                # As bench.infra.ensure_database sets its databases (Django's advice).
                conn.execute(f"ALTER DATABASE {DB} SET timezone TO 'UTC'")
        except BaseException:
            self.pg.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.pg.close()

    def connect(self, dbname: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=self.pg.port, user="postgres", dbname=dbname, autocommit=True
        )

    def track(self, on: bool) -> None:
        with self.connect() as conn:
            conn.execute(f"ALTER SYSTEM SET pg_stat_statements.track = '{'all' if on else 'none'}'")
            conn.execute("SELECT pg_reload_conf()")
        # Every backend reads the file at its next command; the workers' and the submitters'
        # are idle between rounds, so give the signal a moment to land.
        time.sleep(0.5)

    def vacuum(self) -> None:
        with self.connect(DB) as conn:
            conn.execute("VACUUM (ANALYZE)")

    def reset(self) -> None:
        with self.connect(DB) as conn:  # the extension's functions live in the bench's database
            conn.execute("SELECT pg_stat_statements_reset()")

    def read(self) -> list[tuple[Any, ...]]:
        with self.connect(DB) as conn:
            return conn.execute(READ, [DB]).fetchall()

    def settings(self) -> dict[str, str]:
        names = ["fsync", "full_page_writes", "synchronous_commit", "server_version"]
        return server_settings(f"host=127.0.0.1 port={self.pg.port} user=postgres", names)


@contextlib.contextmanager
def _driver_on(b: Bench, server: Server) -> Any:
    """This process's Django connection on the private cluster, then back where it was."""
    from django.core.management import call_command
    from django.db import connections

    settings = connections["default"].settings_dict
    saved = {k: settings[k] for k in ("NAME", "HOST", "PORT")}
    use_target(DB, b.broker())
    settings.update(HOST="127.0.0.1", PORT=str(server.pg.port))
    try:
        call_command("migrate", verbosity=0, interactive=False)
        yield
    finally:
        close_driver_db()
        use_target(saved["NAME"], b.broker())
        settings.update(HOST=saved["HOST"], PORT=saved["PORT"])


def scenario_statements(b: Bench) -> dict[str, Any]:
    concurrency = 2 if 2 in b.concurrencies else b.concurrencies[0]
    n = 500 if b.quick else max(b.jobs, 2000)
    rounds = max(b.rounds, 3)
    with Server() as server, _driver_on(b, server):
        owner = bench_owner()
        env = b.fleet.env(
            DATABASE_URL=server.pg.url, CELERY_BROKER_URL=b.broker(), JOBS_WORKER_NAME="stmts"
        )
        worker = b.fleet.celery_worker(
            "stmts", app="jobsite", queue="jobs", concurrency=concurrency, env=env
        )
        cpu: dict[str, list[float]] = {"untracked": [], "tracked": []}
        rates: dict[str, list[float]] = {"untracked": [], "tracked": []}
        per_message: list[float] = []
        totals: dict[tuple[bool, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        tracked_jobs = 0
        texts: dict[tuple[bool, int], str] = {}  # (top-level, queryid) -> its text
        try:
            # A round's worth of history, then statistics, as section 3-4's database has them:
            # a plan made on tables never analysed scans them whole (PostgreSQL assumes 10
            # pages), until autovacuum's first analyse replaces it.
            broker_round(b, "durable", n, lambda: durable_submit(owner))
            server.vacuum()
            for r in range(rounds):
                order = ["untracked", "tracked"][:: 1 if r % 2 == 0 else -1]
                for mode in order:
                    server.track(mode == "tracked")
                    server.reset()
                    meter = PgCpuMeter([DB], connect=server.connect).start()
                    result = broker_round(b, "durable", n, lambda: durable_submit(owner))
                    marks.stop()  # the batched marks of this round are written in it
                    ms = meter.stop()
                    cpu[mode].append(ms / n)
                    rates[mode].append(result.throughput)
                    per_message.append(result.jobs / result.messages)
                    log(f"    {mode:9s} {result.throughput:8.1f} jobs/s, PG {ms / n:.3f} ms/job")
                    if mode == "tracked":
                        tracked_jobs += n
                        for top, qid, query, calls, exec_ms, plan_ms, rows, wal in server.read():
                            if "pg_stat_statements" in str(query):
                                continue  # the scenario's own reset
                            entry = totals[(bool(top), int(qid))]
                            texts.setdefault((bool(top), int(qid)), str(query))
                            entry["calls"] += int(calls)
                            entry["exec_ms"] += float(exec_ms)
                            entry["plan_ms"] += float(plan_ms)
                            entry["rows"] += int(rows)
                            entry["wal_bytes"] += float(wal or 0)
            settings = server.settings()
        finally:
            b.fleet.stop(worker)
    statements = [
        {
            "toplevel": top,
            "statement": label(texts[(top, qid)]),
            "calls_per_job": t["calls"] / tracked_jobs,
            "exec_ms_per_job": t["exec_ms"] / tracked_jobs,
            "plan_ms_per_job": t["plan_ms"] / tracked_jobs,
            "rows_per_call": t["rows"] / t["calls"] if t["calls"] else 0.0,
            "wal_bytes_per_job": t["wal_bytes"] / tracked_jobs,
            "text": texts[(top, qid)][:400],
        }
        for (top, qid), t in totals.items()
    ]
    statements.sort(key=lambda s: (not s["toplevel"], -s["exec_ms_per_job"]))
    return {
        "jobs_per_round": n,
        "rounds": rounds,
        "concurrency": concurrency,
        "submitters": b.submitters,
        "settings": settings,
        "pg_ms_per_job": {k: median(v) for k, v in cpu.items()},
        "pg_ms_rounds": {k: [round(x, 3) for x in v] for k, v in cpu.items()},
        "jobs_per_s": {k: median(v) for k, v in rates.items()},
        "jobs_per_message": median(per_message),
        "statements": statements,
    }
