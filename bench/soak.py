"""A day of load (issue 28): throughput, latency, table sizes and memory over a sustained run.

    python bench/soak.py --minutes 20 [--write-docs]        (make bench-soak, SOAK_MINUTES=20)

1. A private PostgreSQL cluster (autovacuum on, as a production server has it; the settings in
   force are printed) and a private Redis; the database dj_bench_soak migrated there.
2. The processes of the Procfile: a worker (queue jobs, --concurrency 2), the maintenance
   worker (queue jobs.maintenance: the relay's sweep, reaper, reconciler) and beat.
3. Capacity: a closed loop (every client submits again as soon as its call returned) for
   --capacity-seconds; completed jobs/s over its last two thirds, then the rest drains and
   the three hot tables are vacuumed once (the load's first minute is the baseline).
4. The MVCC phase, --minutes long: open-loop arrivals at --load (0.7) x capacity, single
   submits from a web-like pool of threads plus a `jobs.submit_many` producer. From 25% to
   75% of it a second client holds a REPEATABLE READ transaction with a snapshot taken.
5. The outage phase (skip with --no-outage): the same load, Redis killed for
   --outage-minutes (default a quarter of --minutes: 5 of 20), started again; the outbox's due
   rows are watched until they are back to their level before the outage (rows/s published
   and time to drain), then one more minute of load.
6. Arrivals stop, every accepted job must finish; each one is checked (succeeded, exactly one
   claim that succeeded) and the targets are printed (bench/soak_report.py), the JSON written
   under var/bench/ (soak.json; soak-raw.json with every latency, which `--render` turns
   into the report again), the plot and, with --write-docs, the section of
   docs/benchmarks.md.

Safety: 127.0.0.1 only; every process it started is stopped by pid; the private cluster, the
private Redis and the temp dirs are removed at the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import soak_report  # noqa: E402
from bench.infra import Fleet, machine_info, wait_until  # noqa: E402
from bench.soak_check import job_outcomes  # noqa: E402
from bench.soak_load import AcceptLog, Load  # noqa: E402
from bench.soak_probe import (  # noqa: E402
    ActiveSessions,
    ClusterCpu,
    LongTransaction,
    Probe,
    rss_kb,
    server_settings,
)
from tests.chaos.private_pg import PrivatePostgres  # noqa: E402
from tests.harness import PrivateRedis, Proc  # noqa: E402

DB = "dj_bench_soak"
# What a production server has (PostgreSQL's defaults), said out loud: this machine's shared
# server runs with autovacuum off, the private cluster's initdb defaults have it on.
AUTOVACUUM = {"autovacuum": "on", "track_counts": "on"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python bench/soak.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env_minutes = float(os.environ.get("SOAK_MINUTES", "20"))
    parser.add_argument("--minutes", type=float, default=env_minutes, help="MVCC phase")
    parser.add_argument("--load", type=float, default=0.7, help="share of the capacity")
    parser.add_argument(
        "--rate", type=float, default=None, help="jobs/s instead of --load (A/B runs)"
    )
    parser.add_argument("--capacity-seconds", type=float, default=None, help="default 30")
    parser.add_argument("--outage-minutes", type=float, default=None, help="default minutes/4")
    parser.add_argument("--no-outage", action="store_true", help="skip the broker outage")
    parser.add_argument("--bucket-seconds", type=float, default=60.0, help="one table row")
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=4, help="web-like submitting threads")
    parser.add_argument("--many-share", type=float, default=0.5, help="share via submit_many")
    parser.add_argument("--group", type=int, default=50, help="jobs per submit_many call")
    parser.add_argument("--concurrency", type=int, default=2, help="the worker's, as Procfile")
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument(
        "--explain-slower",
        type=float,
        default=None,
        metavar="MS",
        help="log the plan of every statement slower than MS ms (auto_explain, no ANALYZE) "
        "and keep the cluster's log as OUT/postgres.log",
    )
    parser.add_argument("--write-docs", action="store_true", help="splice docs/benchmarks.md")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--plot", type=Path, default=None, help="default docs/img/soak.png")
    parser.add_argument("--out", type=Path, default=ROOT / "var" / "bench")
    parser.add_argument(
        "--render", type=Path, default=None, help="redo the report from a soak-raw.json"
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0 or not 0 < args.load <= 1:
        parser.error("--minutes must be > 0 and --load in (0, 1]")
    if args.capacity_seconds is None:
        args.capacity_seconds = 30.0
    if args.outage_minutes is None:
        args.outage_minutes = args.minutes / 4
    if args.plot is None:
        args.plot = ROOT / "docs" / "img" / "soak.png" if args.write_docs else args.out / "soak.png"
    return args


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Soak:
    """One run: the world, the phases, the check. `close()` takes everything down."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pg = PrivatePostgres(dbname=DB)
        self.redis = PrivateRedis()
        self.fleet = Fleet()
        self.procs: dict[str, Proc] = {}
        self.restarts: list[str] = []
        self.log = AcceptLog(self.fleet.workdir / "accepted.txt")
        self.result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
        self.load: Load | None = None
        self.probe: Probe | None = None
        self.active: ActiveSessions | None = None
        self.long_xact: LongTransaction | None = None

    # --- the world ---------------------------------------------------------------------

    def up(self) -> None:
        self.pg.init()
        for name, value in AUTOVACUUM.items():
            self.pg.psql(f"ALTER SYSTEM SET {name} = '{value}'")
        self.pg.psql("SELECT pg_reload_conf()")
        if self.args.explain_slower is not None:
            # Loaded by every new session of the database; plans only (no ANALYZE, so no
            # timing overhead). ALTER SYSTEM refuses a module's setting it has not loaded.
            for name, value in (
                ("session_preload_libraries", "auto_explain"),
                ("auto_explain.log_min_duration", f"{self.args.explain_slower:g}ms"),
            ):
                self.pg.psql(f"ALTER DATABASE {DB} SET \"{name}\" = '{value}'")
        self.redis.start()
        os.environ.update(
            {
                "DATABASE_URL": self.pg.url,
                "CELERY_BROKER_URL": self.redis.url,
                "DJANGO_SETTINGS_MODULE": "jobsite.settings",
                "PGAPPNAME": "soak-web",
                "LOG_LEVEL": "WARNING",
            }
        )
        import django

        django.setup()
        # A failed fast-path publish logs one WARNING per row: thousands a second during the
        # outage. The rows stay in the outbox; the outage's own numbers say what happened.
        logging.getLogger("outbox.relay").setLevel(logging.ERROR)
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        self.result["settings"] = server_settings(self.conninfo)
        log(
            "postgres settings in force: "
            + ", ".join(f"{k}={v}" for k, v in self.result["settings"].items())
        )
        self.start_processes()

    @property
    def conninfo(self) -> str:
        return f"host=127.0.0.1 port={self.pg.port} user=postgres dbname={DB}"

    def env(self, name: str) -> dict[str, str]:
        return self.fleet.env(
            DATABASE_URL=self.pg.url,
            CELERY_BROKER_URL=self.redis.url,
            PGAPPNAME=f"soak-{name}",
            JOBS_WORKER_NAME=name,
        )

    def start_processes(self) -> None:
        """As the Procfile runs them: worker, maintenance worker, beat."""
        self.start_worker("worker", "jobs", self.args.concurrency)
        self.start_worker("maintenance", "jobs.maintenance", 1)
        self.procs["beat"] = self.fleet.celery_beat("beat", env=self.env("beat"))

    def start_worker(self, name: str, queue: str, concurrency: int) -> None:
        self.procs[name] = self.fleet.celery_worker(
            name, app="jobsite", queue=queue, concurrency=concurrency, env=self.env(name)
        )

    def supervise(self) -> None:
        """Restart a process that died, as the Procfile's supervisor would; recorded."""
        for name, proc in list(self.procs.items()):
            if proc.alive():
                continue
            self.restarts.append(f"{time.strftime('%H:%M:%S')} {name}: {proc.log()[-400:]}")
            log(f"{name} died; restarting it")
            self.fleet.procs.remove(proc) if proc in self.fleet.procs else None
            if name == "beat":
                self.procs["beat"] = self.fleet.celery_beat("beat", env=self.env("beat"))
            else:
                queue = "jobs" if name == "worker" else "jobs.maintenance"
                self.start_worker(name, queue, self.args.concurrency if name == "worker" else 1)

    def pids(self) -> dict[str, int]:
        out = {name: proc.pid for name, proc in self.procs.items() if proc.alive()}
        out["web"] = os.getpid()
        return out

    def close(self) -> None:
        for part in (self.load, self.long_xact, self.probe, self.active):
            if part is not None:
                with contextlib.suppress(Exception):
                    part.stop()
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        self.fleet.close()
        self.redis.close()
        if self.args.explain_slower is not None and self.pg.logfile.exists():
            self.args.out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.pg.logfile, self.args.out / "postgres.log")
        self.pg.close()

    # --- reads -------------------------------------------------------------------------

    def query(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def query_each(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            conn.execute(sql)

    def counts(self) -> tuple[int, int]:
        """(succeeded, not finished) over all jobs."""
        ((done, active),) = self.query(
            "SELECT count(*) FILTER (WHERE state = 'succeeded'), "
            "count(*) FILTER (WHERE state IN ('queued', 'leased', 'retry_wait')) FROM jobs_job"
        )
        return int(done), int(active)

    def outbox_due(self) -> int:
        ((due,),) = self.query(
            "SELECT count(*) FROM outbox_outboxentry "
            "WHERE published_at IS NULL AND available_at <= now()"
        )
        return int(due)

    def wait_drained(self, timeout: float) -> float:
        began = time.monotonic()
        wait_until(lambda: self.counts()[1] == 0, timeout=timeout, interval=1.0, what="drain")
        return time.monotonic() - began

    # --- phases ------------------------------------------------------------------------

    def capacity(self, owner: Any) -> float:
        """Completed jobs/s under a closed loop, over the last two thirds of the window."""
        args = self.args
        probe_log = AcceptLog(self.fleet.workdir / "capacity.txt")
        rss_before = rss_kb(os.getpid())
        load = Load(
            owner, probe_log, threads=args.threads, many_share=args.many_share, group=args.group
        )
        load.start()
        time.sleep(args.capacity_seconds / 3)
        done0, t0 = self.counts()[0], time.monotonic()
        time.sleep(args.capacity_seconds * 2 / 3)
        done1, t1 = self.counts()[0], time.monotonic()
        load.stop()
        probe_log.close()
        rate = (done1 - done0) / (t1 - t0)
        drained = self.wait_drained(args.drain_timeout)
        # The burst left dead tuples of its own (a backlog three times the capacity): the
        # load's first minute is the baseline of every ratio, so it starts from clean tables.
        self.query_each("VACUUM (ANALYZE) jobs_job, jobs_jobevent, outbox_outboxentry")
        self.result["capacity"] = {
            "jobs_per_s": round(rate, 1),
            "accepted": len(probe_log),
            "accepted_per_s": round(len(probe_log) / args.capacity_seconds, 1),
            "errors": probe_log.errors[:5],
            "drain_after_s": round(drained, 1),
            "web_rss_mb_before": round(rss_before / 1024, 1),
            "web_rss_mb_after": round(rss_kb(os.getpid()) / 1024, 1),
        }
        log(
            f"capacity: {rate:.0f} jobs/s completed (closed loop, {len(probe_log)} accepted, "
            f"rest drained in {drained:.0f}s)"
        )
        return rate

    def outage(self, started: float) -> None:
        """Redis killed for --outage-minutes at load, started again; the outbox drain."""
        args = self.args
        before = self.outbox_due()
        at = time.monotonic() - started
        log(
            f"broker outage: killing the private Redis for {args.outage_minutes:g} min "
            f"(outbox due rows before: {before})"
        )
        self.redis.kill()
        errors_before = self.log.error_count
        try:
            deadline = time.monotonic() + args.outage_minutes * 60
            while time.monotonic() < deadline:
                time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        finally:
            peak = self.outbox_due()
            self.redis.start()  # the same port: every client reconnects
        back = time.monotonic() - started
        back_wall = time.time()
        log(f"broker back: {peak} due rows in the outbox; draining")
        self.supervise()
        floor = max(before * 2, 200)
        wait_until(
            lambda: self.outbox_due() <= floor,
            timeout=args.drain_timeout,
            interval=0.5,
            what="the outbox backlog to drain",
        )
        drained = time.monotonic() - started
        ((published,),) = self.query(
            "SELECT count(*) FROM outbox_outboxentry WHERE published_at >= to_timestamp(%s)",
            [back_wall],
        )
        # The backlog itself (rows written before Redis returned): when its first row went
        # out (the processes' reconnect) and how fast the rest followed.
        ((backlog, first, last),) = self.query(
            "SELECT count(*), EXTRACT(EPOCH FROM min(published_at)) - %s, "
            "EXTRACT(EPOCH FROM max(published_at)) - %s FROM outbox_outboxentry "
            "WHERE created_at < to_timestamp(%s) AND published_at >= to_timestamp(%s)",
            [back_wall, back_wall, back_wall, back_wall],
        )
        active = float(last or 0) - float(first or 0)
        seconds = drained - back
        self.result["outage"] = {
            "start_s": round(at, 1),
            "end_s": round(back, 1),
            "drained_s": round(drained, 1),
            "due_before": before,
            "due_at_return": peak,
            "published_while_draining": int(published),
            "time_to_drain_s": round(seconds, 1),
            "rows_per_s": round(int(published) / seconds, 1) if seconds > 0 else None,
            "backlog_published": int(backlog),
            "first_publish_after_s": round(float(first or 0), 2),
            "backlog_rows_per_s": round(int(backlog) / active, 1) if active > 0 else None,
            "submit_errors": self.log.error_count - errors_before,
        }
        log(
            f"outbox drained in {seconds:.1f}s: {published} rows published "
            f"({self.result['outage']['rows_per_s']} rows/s); the backlog's {backlog} rows "
            f"from {float(first or 0):.1f}s on at {self.result['outage']['backlog_rows_per_s']} "
            "rows/s"
        )

    def run(self) -> dict[str, Any]:
        args = self.args
        self.result["machine"] = machine_info()
        self.up()
        from django.contrib.auth import get_user_model

        owner, _ = get_user_model().objects.get_or_create(username="bench")
        ((version,),) = self.query("SHOW server_version")
        self.result["machine"]["postgresql"] = str(version)
        capacity = self.capacity(owner)
        rate = args.rate or capacity * args.load
        self.result["rate"] = round(rate, 1)
        log(f"MVCC phase: {args.minutes:g} min of open-loop arrivals at {rate:.0f} jobs/s")
        started, started_wall = time.monotonic(), time.time()
        self.result["started_wall"] = started_wall
        self.probe = Probe(
            self.conninfo,
            started,
            self.pids,
            every=args.sample_seconds,
            cluster=ClusterCpu(self.pg.postmaster_pid()),
        )
        self.probe.start()
        from bench.statements import label

        self.active = ActiveSessions(self.conninfo, started, label)
        self.active.start()
        span = args.minutes * 60
        self.long_xact = LongTransaction(self.conninfo, started, 0.25 * span, 0.75 * span)
        self.long_xact.start()
        self.load = Load(
            owner,
            self.log,
            threads=args.threads,
            rate=rate,
            many_share=args.many_share,
            group=args.group,
        )
        self.load.start()
        self.wait_phase(started, span)
        self.long_xact.stop()
        if not args.no_outage:
            self.outage(started)
            self.wait_phase(started, time.monotonic() - started + args.bucket_seconds)
        self.result["load_end_s"] = round(time.monotonic() - started, 1)
        self.load.stop()
        self.log.close()
        log(f"arrivals stopped: {len(self.log)} accepted; waiting for every job to finish")
        self.result["final_drain_s"] = round(self.wait_drained(args.drain_timeout), 1)
        time.sleep(args.sample_seconds)
        self.probe.stop()
        self.active.stop()
        self.result["active_sessions"] = {
            str(minute): {
                "looks": self.active.looks[minute],
                "seen": seen,
                "texts": self.active.texts.get(minute, {}),
            }
            for minute, seen in sorted(self.active.seen.items())
        }
        self.result["long_xact"] = {
            "begin_s": self.long_xact.opened_at,
            "end_s": self.long_xact.closed_at,
            "snapshot_xmin": self.long_xact.snapshot_xmin,
        }
        self.result["probe_errors"] = self.probe.errors[:10]
        self.result["active_sessions_error"] = self.active.error
        self.result["restarts"] = self.restarts
        self.result["submit_errors"] = self.log.errors[:10]
        self.result["submit_error_count"] = self.log.error_count
        self.result["slowest_submit_s"] = round(self.log.slowest_submit, 3)
        self.result["samples"] = [asdict(s) for s in self.probe.samples]
        self.result["jobs"] = job_outcomes(self.query, self.log.read(), started_wall)
        return self.result

    def wait_phase(self, started: float, until: float) -> None:
        while time.monotonic() - started < until:
            time.sleep(min(5.0, max(0.0, until - (time.monotonic() - started))))
            self.supervise()


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM goes the way of Ctrl-C: through every finally, so nothing is left running."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        result = json.loads(args.render.read_text())
        command = result.get("command", "python bench/soak.py")
    else:
        signal.signal(signal.SIGTERM, _interrupt)
        soak = Soak(args)
        try:
            result = soak.run()
        finally:
            soak.close()
        command = " ".join(["python bench/soak.py", *(sys.argv[1:] if argv is None else argv)])
        result["command"] = command
        args.out.mkdir(parents=True, exist_ok=True)
        # Everything measured, latencies included: --render redoes the report from it.
        (args.out / "soak-raw.json").write_text(json.dumps(result, default=str))
    report = soak_report.analyze(result)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    payload = {**{k: v for k, v in result.items() if k != "jobs"}, "report": report}
    payload["jobs"] = {k: v for k, v in result["jobs"].items() if k not in ("latency", "finished")}
    for path in (args.out / f"soak-{stamp}.json", args.out / "soak.json"):
        path.write_text(json.dumps(payload, indent=2, default=str))
    soak_report.plot(result, report, args.plot)
    soak_report.print_report(report)
    log(f"results: {args.out / 'soak.json'}; plot: {args.plot}")
    if args.write_docs:
        doc = soak_report.splice(
            args.docs.read_text(), soak_report.section(report, command, args.plot)
        )
        args.docs.write_text(doc)
        log(f"section written to {args.docs}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
