"""The chaos soak: real workers, relay, reaper and provider under a seeded fault schedule.

    python -m tests.chaos.soak [--jobs N] [--seed S] [--duration SECONDS] [--workers N]

It starts a PRIVATE PostgreSQL cluster (so it can crash it) and a private Redis, migrates
the database `dj_chaos` there, starts the provider, the relay (`outbox_relay --loop`), a
maintenance process (reaper + reconciler, what beat does) and N celery workers, then submits
N jobs of the chaos kinds (tests/kinds_chaos.py) over the run while a fault thread kills,
stops and restarts things. After the last fault everything is restored, the run drains,
and tests.chaos.checker proves the invariants. Exit status 0 only when every check passed.

A share of the jobs (--batch-share) is submitted in groups through `jobs.submit_many`,
whose rows are published after the commit packed into `jobs.execute_many` batch messages
(the relay packs backlogged rows too), so faults also hit batches mid-flight: the report
counts batch messages claimed and those whose leases had to be recovered.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

KIND_MIX: list[tuple[str, float]] = [
    ("chaos.sleep", 0.37),
    ("chaos.fan_out", 0.05),
    ("chaos.notify", 0.27),
    ("chaos.flaky", 0.20),
    ("chaos.permanent", 0.09),
    ("chaos.crash", 0.02),
]


@dataclass
class Sample:
    t: float
    oldest_queued_age: float
    active: int
    finished: int


@dataclass
class SoakResult:
    args: dict[str, Any]
    accepted: int = 0
    cancels: int = 0
    submit_seconds: float = 0.0
    drain_seconds: float = 0.0
    drained: bool = False
    faults: dict[str, int] = field(default_factory=dict)
    fault_log: list[tuple[float, str, str]] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    check: dict[str, Any] = field(default_factory=dict)
    reconciler: str = ""
    worker_deaths: list[str] = field(default_factory=list)
    straggler: list[str] = field(default_factory=list)
    submitted_in_batches: int = 0
    batches: dict[str, int] = field(default_factory=dict)
    schedule: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.drained and bool(self.check.get("ok"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.chaos.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="seconds of submissions + faults (default jobs/15, at least 60)",
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--batch-share",
        type=float,
        default=0.3,
        help="share of jobs submitted in groups through jobs.submit_many (batch messages)",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="pool children per worker")
    parser.add_argument(
        "--fault-every", type=float, default=4.0, help="mean seconds between faults"
    )
    parser.add_argument("--drain-timeout", type=float, default=None)
    parser.add_argument(
        "--retention",
        type=float,
        default=10.0,
        help="prune finished jobs older than this many seconds during the run (0: no "
        "pruning); the checker reads the pruned rows from an archive",
    )
    parser.add_argument(
        "--outbox-retention",
        type=float,
        default=300.0,
        help="prune published outbox rows older than this many seconds (0: never); each "
        "job's newest row stays however old (a due job's row is the reconciler's proof)",
    )
    parser.add_argument("--report", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--keep-logs", action="store_true", help="keep process logs")
    parser.add_argument("--maintenance", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.workers < 1:
        parser.error("--jobs and --workers must be at least 1")
    if not 0.0 <= args.batch_share <= 1.0:
        parser.error("--batch-share must be between 0 and 1")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    if args.duration is None:
        args.duration = max(60.0, args.jobs / 15.0)
    if args.drain_timeout is None:
        args.drain_timeout = max(240.0, args.jobs / 10.0)
    return args


def _retry_db[T](fn: Callable[[], T], *, timeout: float = 90.0) -> T:
    """Run a database call, riding out a crashed/restarting PostgreSQL (the fault we inject)."""
    from django.db import InterfaceError, OperationalError, close_old_connections, connection

    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (OperationalError, InterfaceError):
            if time.monotonic() > deadline:
                raise
            close_old_connections()
            with contextlib.suppress(Exception):
                connection.close()
            time.sleep(0.3)


def job_input(rng: random.Random, kind: str) -> dict[str, Any]:
    if kind == "chaos.sleep":
        return {"seconds": rng.choice([0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 1.5])}
    if kind == "chaos.notify":
        return {"before": rng.choice([0.0, 0.1, 0.3]), "after": rng.choice([0.0, 0.2, 0.6])}
    if kind == "chaos.flaky":
        return {"fail_times": rng.randint(1, 2)}
    if kind == "chaos.fan_out":
        return {"n": rng.randint(1, 3), "after": rng.choice([0.0, 0.2, 0.5])}
    return {}


def oldest_queued_job_id() -> str | None:
    from jobs.models import Job

    pk = (
        Job.objects.filter(state__in=["queued", "retry_wait"], next_attempt_at__isnull=False)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)
        .first()
    )
    return str(pk) if pk else None


# One priority per submission call (low, default twice, high): every message band and the
# priority a job's later messages keep meet the faults.
PRIORITIES = [-50, 0, 0, 50]


def job_story(job_id: str) -> list[str]:
    """The JobEvent trail and outbox rows of one job, one line each, in time order."""
    from jobs.models import JobEvent
    from outbox.models import OutboxEntry

    lines = [
        f"{e.at:%H:%M:%S.%f} event {e.from_state or '-'}->{e.to_state} g{e.generation} "
        f"a{e.attempt} {e.worker or e.actor} {e.reason}"
        for e in JobEvent.objects.filter(job_id=job_id).order_by("id")
    ]
    lines += [
        f"{o.created_at:%H:%M:%S.%f} outbox #{o.id} available {o.available_at:%H:%M:%S} "
        f"published {o.published_at and f'{o.published_at:%H:%M:%S.%f}'} "
        f"attempts {o.publish_attempts} {o.last_error[:80]}"
        for o in OutboxEntry.objects.filter(job_id=job_id).order_by("id")
    ]
    return sorted(lines)


# A batch claim (jobs_claim_many) whose lease was later recovered: reaped (lease_expired)
# at its generation, or taken over by the next one. Its owner token names its message.
_BATCH_STATS_SQL = """
WITH batch AS (
    SELECT job_id, generation, worker FROM jobs_jobevent
    WHERE to_state = 'leased' AND reason = 'claimed in a batch'
), recovered AS (
    SELECT b.* FROM batch b WHERE EXISTS (
        SELECT 1 FROM jobs_jobevent e
        WHERE e.job_id = b.job_id AND e.from_state = 'leased' AND (
            (e.generation = b.generation AND e.to_state = 'retry_wait'
             AND e.details->>'category' = 'lease_expired')
            OR (e.generation = b.generation + 1 AND e.reason = 'took over expired lease')
        )
    )
)
SELECT (SELECT count(*) FROM batch), (SELECT count(DISTINCT worker) FROM batch),
       (SELECT count(*) FROM recovered), (SELECT count(DISTINCT worker) FROM recovered)
"""


def batch_stats() -> dict[str, int]:
    """What the batch path saw: jobs claimed in batches, batch messages that claimed any
    (one owner token each), and those of both whose leases had to be recovered (their
    worker was killed or stopped mid-batch)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_BATCH_STATS_SQL)
        jobs, messages, jobs_recovered, messages_recovered = cursor.fetchone()
    return {
        "batch_claims": int(jobs),
        "batch_messages": int(messages),
        "batch_claims_recovered": int(jobs_recovered),
        "batch_messages_recovered": int(messages_recovered),
    }


def oldest_queued_age() -> tuple[float, int, int]:
    """(age in seconds of the oldest due queued/retry_wait job, active jobs, finished jobs)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(next_attempt_at) "
            "FILTER (WHERE state IN ('queued','retry_wait') AND next_attempt_at <= now())), 0), "
            "count(*) FILTER (WHERE state IN ('queued','leased','retry_wait')), "
            "count(*) FILTER (WHERE state NOT IN ('queued','leased','retry_wait')) FROM jobs_job"
        )
        age, active, finished = cursor.fetchone()
    return float(age), int(active), int(finished)


class Soak:
    """One soak run: the world, the submissions, the faults, the drain, the check."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.result = SoakResult(args={k: str(v) for k, v in vars(args).items()})
        self.accepted: set[str] = set()
        self.started = time.monotonic()
        self.cluster: Any = None
        self.straggler: str | None = None  # the job that waited longest: its story is reported
        self.straggler_age = 0.0

    def sample(self) -> None:
        if self.cluster is not None:
            self.cluster.supervise()
        with contextlib.suppress(Exception):
            age, active, finished = _retry_db(oldest_queued_age, timeout=5)
            if age > self.straggler_age:
                self.straggler_age = age
                self.straggler = _retry_db(oldest_queued_job_id, timeout=5)
            self.result.samples.append(
                Sample(round(time.monotonic() - self.started, 1), round(age, 2), active, finished)
            )

    def groups(self, count: int) -> list[list[int]]:
        """Consecutive plan indices, one group per submission call: a single job (its own
        `job_submit`, idempotency key and all) or a group of 2-12 for `jobs.submit_many`,
        so that about --batch-share of the jobs go in groups."""
        share, low, high = self.args.batch_share, 2, 12
        mean = (low + high) / 2
        start_group = share / (mean - (mean - 1) * share) if share < 1 else 1.0
        groups: list[list[int]] = []
        n = 0
        while n < count:
            size = self.rng.randint(low, high) if self.rng.random() < start_group else 1
            groups.append(list(range(n, min(count, n + size))))
            n += size
        return groups

    def submit_group(
        self, owner: Any, requests: list[tuple[int, str, dict[str, Any]]], priority: int = 0
    ) -> list[Any]:
        """One submission call: `job_submit` for one job; `jobs.submit_many` for a group (one
        transaction; its rows are published after the commit in batch messages)."""
        from jobs.bulk_submit import job_submit_many
        from jobs.submission import job_submit

        if len(requests) == 1:
            ((i, kind, payload),) = requests
            return [
                _retry_db(
                    lambda: job_submit(
                        kind=kind,
                        input=payload,
                        owner=owner,
                        idempotency_key=f"chaos-{self.args.seed}-{i}",
                        priority=priority,
                    )
                )
            ]
        # Plain requests (no idempotency key): a retry after a commit whose answer was lost
        # may accept the group twice; the extra jobs are real work and are checked as such.
        created = _retry_db(
            lambda: job_submit_many(
                [
                    {"kind": kind, "input": payload, "owner": owner, "priority": priority}
                    for _, kind, payload in requests
                ]
            )
        )
        self.result.submitted_in_batches += len(created)
        return created

    def submit_all(self, owner: Any) -> None:
        from jobs.exceptions import InvalidTransition
        from jobs.services import job_cancel

        args = self.args
        kinds = [k for k, _ in KIND_MIX]
        weights = [w for _, w in KIND_MIX]
        plan = [(i, self.rng.choices(kinds, weights)[0]) for i in range(args.jobs)]
        submit_window = args.duration * 0.75
        began = time.monotonic()
        next_sample = began
        sleepers: list[str] = []
        for group in self.groups(len(plan)):
            # Pace submissions over the window, so faults hit a system under steady load.
            due = began + submit_window * group[0] / len(plan)
            while time.monotonic() < due:
                time.sleep(min(0.05, max(0.0, due - time.monotonic())))
            requests = [
                (i, kind, job_input(self.rng, kind)) for i, kind in (plan[n] for n in group)
            ]
            priority = self.rng.choice(PRIORITIES)
            for job in self.submit_group(owner, requests, priority):
                self.accepted.add(str(job.pk))
                if job.kind == "chaos.sleep":
                    sleepers.append(str(job.pk))
                if sleepers and self.rng.random() < 0.02:
                    victim = self.rng.choice(sleepers[-10:])  # recent: likely not finished
                    with contextlib.suppress(InvalidTransition):
                        _retry_db(partial(job_cancel, job_id=UUID(victim), actor="chaos"))
                        self.result.cancels += 1
            if time.monotonic() >= next_sample:
                self.sample()
                next_sample = time.monotonic() + 1.0
        self.result.accepted = len(self.accepted)
        self.result.submit_seconds = round(time.monotonic() - began, 1)

    def run(self) -> SoakResult:
        from tests.chaos.faults import (
            Cluster,
            FaultInjector,
            FaultRunner,
            fault_schedule,
        )
        from tests.chaos.private_pg import PrivatePostgres
        from tests.harness import Harness, PrivateRedis

        args = self.args
        workdir = Path(tempfile.mkdtemp(prefix="jobs-chaos-"))
        (workdir / "media").mkdir()
        pg = PrivatePostgres(dbname="dj_chaos")
        redis = PrivateRedis()
        cluster: Cluster | None = None
        runner: FaultRunner | None = None
        try:
            pg.init()
            redis.start()
            _django_setup(database_url=pg.url, broker_url=redis.url)
            from django.contrib.auth import get_user_model
            from django.core.management import call_command

            call_command("migrate", verbosity=0, interactive=False)
            if args.retention or args.outbox_retention:
                from tests.chaos import archive

                archive.install()
            owner = get_user_model().objects.create_user(username="chaos", password="x")
            harness = Harness(
                broker_url=redis.url,
                database_url=pg.url,
                workdir=workdir,
                media_root=workdir / "media",
            )
            cluster = Cluster(
                harness=harness,
                redis=redis,
                pg=pg,
                worker_count=args.workers,
                concurrency=args.concurrency,
                retention=args.retention,
                outbox_retention=args.outbox_retention,
            )
            cluster.start_all()
            self.cluster = cluster
            self.result.reconciler = "jobs.ops.reconcile (jobs_reconcile --repair)"
            injector = FaultInjector(cluster, random.Random(args.seed * 7919))
            # Faults go on until both the duration has passed and every job was submitted
            # (a loaded machine submits slower than planned): schedule far ahead, stop early.
            schedule = fault_schedule(
                random.Random(args.seed), duration=args.duration * 20, every=args.fault_every
            )
            runner = FaultRunner(injector, schedule)
            self.started = time.monotonic()
            runner.start()
            self.submit_all(owner)
            while time.monotonic() - self.started < args.duration:
                self.sample()
                time.sleep(1.0)
            runner.stop()
            self.result.faults = dict(injector.counts)
            self.result.fault_log = injector.log
            self.restore(cluster)
            self.schedule_pause()
            self.drain()
            self.check(cluster)
            self.result.worker_deaths = list(cluster.deaths)
        finally:
            if runner is not None:
                runner.stop()
            if cluster is not None:
                cluster.stop()
            redis.close()
            pg.close()
            if not (args.keep_logs or os.environ.get("JOBS_TEST_KEEP_LOGS")):
                import shutil

                shutil.rmtree(workdir, ignore_errors=True)
            else:
                print(f"logs kept in {workdir}", file=sys.stderr)
        return self.result

    def restore(self, cluster: Any) -> None:
        """After the last fault: every server up, every process back at full strength."""
        from tests.harness import wait_until

        cluster.supervise()
        if not cluster.pg.ready():
            cluster.pg.start()
        if not cluster.redis.ping():
            cluster.redis.start()
        if cluster.relay is None or not cluster.relay.alive():
            cluster.start_relay()
        if cluster.maintenance is None or not cluster.maintenance.alive():
            cluster.start_maintenance()
        while len(cluster.alive_workers()) < self.args.workers:
            cluster.start_worker()
        wait_until(lambda: cluster.harness._provider_up(), timeout=30, what="provider")

    def schedule_pause(self) -> None:
        """No more ticks (so the run can drain): the schedule's pause, as an operator's."""
        from jobs.models import Schedule
        from jobs.scheduler import schedule_pause
        from tests.chaos.faults import SOAK_SCHEDULE

        def pause() -> None:
            row = Schedule.objects.filter(name=SOAK_SCHEDULE).first()
            if row is not None and not row.paused:
                schedule_pause(schedule_id=row.pk, actor="chaos soak", note="drain")

        _retry_db(pause)

    def drain(self) -> None:
        began = time.monotonic()
        deadline = began + self.args.drain_timeout
        while time.monotonic() < deadline:
            self.sample()
            if self.result.samples and self.result.samples[-1].active == 0:
                self.result.drained = True
                break
            time.sleep(1.0)
        self.result.drain_seconds = round(time.monotonic() - began, 1)

    def check(self, cluster: Any) -> None:
        from tests.chaos.archive import Rows
        from tests.chaos.checker import check_run, check_schedule
        from tests.chaos.faults import SOAK_SCHEDULE
        from tests.kinds_chaos import EXPECTED

        provider = cluster.harness.provider_stats()
        report = _retry_db(
            lambda: check_run(
                accepted=self.accepted,
                expected=EXPECTED,
                provider=provider,
                retention=self.args.retention or None,
            )
        )
        if self.straggler:
            self.result.straggler = [
                f"job {self.straggler} waited {self.straggler_age:.1f}s",
                *_retry_db(lambda: job_story(self.straggler or "")),
            ]
        if not self.result.drained:
            report.violations.insert(0, f"did not drain within {self.args.drain_timeout:.0f}s")
        rows = Rows(archived=bool(self.args.retention))
        ticks = _retry_db(lambda: check_schedule(SOAK_SCHEDULE, no_gap=True, rows=rows))
        report.violations.extend(ticks.violations)
        self.result.schedule = ticks.as_dict()
        self.result.check = report.as_dict()
        self.result.batches = {
            "submitted_in_batches": self.result.submitted_in_batches,
            **_retry_db(batch_stats),
        }


def _django_setup(*, database_url: str, broker_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ["CELERY_BROKER_URL"] = broker_url
    os.environ["DATABASE_CONN_MAX_AGE"] = "0"
    os.environ["PGAPPNAME"] = "chaos-soak"
    os.environ["JOBS_HANDLER_MODULES"] = "tests.kinds_chaos"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    import django

    django.setup()


def print_report(result: SoakResult) -> None:
    """The table `make chaos` prints."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    check = result.check
    summary = Table(title=f"chaos soak (seed {result.args['seed']})", show_header=False)
    summary.add_column("what")
    summary.add_column("value", justify="right")
    for what, value in [
        ("jobs accepted", result.accepted),
        ("workers x concurrency", f"{result.args['workers']} x {result.args['concurrency']}"),
        ("submission window (s)", result.submit_seconds),
        ("drain after last fault (s)", result.drain_seconds),
        ("cancel requests", result.cancels),
        ("jobs submitted through submit_many", result.submitted_in_batches),
        (
            "schedule ticks run once (missed)",
            f"{result.schedule.get('ticks')} ({result.schedule.get('missed')})",
        ),
        (
            "batch messages claimed (recovered after a fault)",
            f"{result.batches.get('batch_messages')} "
            f"({result.batches.get('batch_messages_recovered')})",
        ),
        (
            "jobs claimed in batches (recovered after a fault)",
            f"{result.batches.get('batch_claims')} "
            f"({result.batches.get('batch_claims_recovered')})",
        ),
        ("reconciler", result.reconciler),
        (
            "pruned during the run: jobs / events / ledger rows / outbox rows",
            " / ".join(
                str(check.get("pruned", {}).get(t, "-"))
                for t in (
                    "jobs_job",
                    "jobs_jobevent",
                    "jobs_effectledgerentry",
                    "outbox_outboxentry",
                )
            ),
        ),
        (
            "claims (takeovers of expired leases)",
            f"{check.get('claims')} ({check.get('takeovers')})",
        ),
        ("max attempt of any job", check.get("max_attempt")),
        ("jobs re-enqueued by the reconciler", check.get("reconciler_requeues")),
        (
            "effect ledger rows (begun > once)",
            f"{check.get('effect_rows')} ({check.get('effect_rows_retried')})",
        ),
        (
            "provider notices / requests",
            f"{check.get('notices')} / {check.get('provider_requests')}",
        ),
        ("keys requested more than once", check.get("keys_requested_more_than_once")),
        (
            "max oldest-queued age (s)",
            max((s.oldest_queued_age for s in result.samples), default=0),
        ),
    ]:
        summary.add_row(what, str(value))
    for name, value in sorted(check.get("signals", {}).items()):
        summary.add_row(f"signal {name}", str(value))
    console.print(summary)

    faults = Table(title="faults injected")
    faults.add_column("fault")
    faults.add_column("count", justify="right")
    for name, count in sorted(result.faults.items()):
        faults.add_row(name, str(count))
    console.print(faults)

    outcomes = Table(title="outcomes by kind")
    states = sorted({s for kinds in check.get("by_kind", {}).values() for s in kinds})
    outcomes.add_column("kind")
    for state in states:
        outcomes.add_column(state, justify="right")
    for kind, counts in sorted(check.get("by_kind", {}).items()):
        outcomes.add_row(kind, *[str(counts.get(s, 0)) for s in states])
    console.print(outcomes)

    verdict = "[green]PASS[/green]" if result.ok else "[red]FAIL[/red]"
    console.print(f"verdict: {verdict}  violations: {check.get('violation_count', '?')}")
    for violation in check.get("violations", [])[:20]:
        console.print(f"  - {violation}")
    for line in result.straggler[:12]:
        console.print(f"  longest wait: {line}", markup=False)
    for death in result.worker_deaths:
        console.print(f"  worker died on its own (supervisor restarted it): {death}", markup=False)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.maintenance:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
        import django

        django.setup()
        from tests.chaos.faults import maintenance_loop

        maintenance_loop()
        return 0
    print(
        f"chaos soak: {args.jobs} jobs, seed {args.seed}, {args.duration:.0f}s of faults, "
        f"{args.workers} workers",
        flush=True,
    )
    result = Soak(args).run()
    if args.report:
        payload = {
            **result.__dict__,
            "ok": result.ok,
            "samples": [s.__dict__ for s in result.samples],
        }
        args.report.write_text(json.dumps(payload, indent=2, default=str))
    print_report(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
