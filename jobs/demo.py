"""The guided demo (`manage.py jobs_demo`): the seed drills, on real worker processes.

It starts everything it needs as child processes it alone owns (a private redis-server, two
or three celery workers, the outbox relay, the notification provider), runs four drills,
narrates them, checks what each drill promises, prints the accounting and stops every child
by pid, also on Ctrl-C. The reaper runs inside the demo process (direct `jobs_reap` calls
while it waits). Demo kinds with 3 s leases live in jobs.demo_kinds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import demo_kinds  # noqa: F401  (registers demo.report and demo.slow here too)
from .artifacts import artifact_name
from .models import EffectLedgerEntry, EffectState, Job, JobEvent, QuarantineRecord
from .reaper import jobs_reap
from .signals import (
    DUPLICATE_DELIVERIES,
    DUPLICATE_EFFECTS,
    EFFECTS_REUSED,
    STALE_WRITES_REJECTED,
    signal_values,
)

ROOT = Path(settings.BASE_DIR)
DEMO_HANDLER_MODULE = "jobs.demo_kinds"


class DemoFailed(RuntimeError):
    """A process the demo needs would not start, or a wait ran out of time."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def child_pids(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        return []


@dataclass
class Child:
    """One process the demo started; stopped by its pid (and its pool children's pids)."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGCONT (a paused pool child must be able to exit), SIGTERM, then SIGKILL."""
        if not self.alive():
            return
        pids = [self.pid, *child_pids(self.pid)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in [*child_pids(self.pid), self.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
        for pid in pids[1:]:  # pool children left behind by a killed parent
            if process_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


@dataclass
class Processes:
    """Spawns and owns the demo's children; `stop_all` ends them in reverse order."""

    workdir: Path
    database_url: str
    broker_url: str = ""
    provider_port: int = 0
    children: list[Child] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        modules = [m for m in env.get("JOBS_HANDLER_MODULES", "").split(",") if m.strip()]
        env.update(
            {
                "DATABASE_URL": self.database_url,
                "CELERY_BROKER_URL": self.broker_url,
                "NOTIFY_PROVIDER_URL": f"http://127.0.0.1:{self.provider_port}/notify",
                "JOBS_HANDLER_MODULES": ",".join([*modules, DEMO_HANDLER_MODULE]),
                "JOBS_MEDIA_ROOT": str(settings.MEDIA_ROOT),
                "DJANGO_SETTINGS_MODULE": "jobsite.settings",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
                "PYTHONUNBUFFERED": "1",
                "DATABASE_CONN_MAX_AGE": "0",
                "CELERY_WORKER_SEND_TASK_EVENTS": "0",
            }
        )
        env.pop("JOBS_FAILPOINTS", None)
        env.update(extra)
        return env

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Child:
        log_path = self.workdir / f"{name}.log"
        with open(log_path, "ab") as handle:
            # A session of their own: the terminal's Ctrl-C reaches only the demo, which
            # then stops each child in order (a paused worker first gets SIGCONT).
            popen = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        child = Child(name, popen, log_path)
        self.children.append(child)
        return child

    def start_redis(self) -> Child:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).exists():
            raise DemoFailed("redis-server not found: install it, or pass --broker-url")
        port = free_port()
        argv = [
            binary,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
        ]
        child = self.spawn("redis", argv, dict(os.environ))
        self.broker_url = f"redis://127.0.0.1:{port}/0"
        wait_plain(lambda: redis_ping(port), what="private redis to answer", timeout=20)
        return child

    def start_provider(self) -> Child:
        self.provider_port = free_port()
        argv = [sys.executable, "manage.py", "notify_provider", "--port", str(self.provider_port)]
        child = self.spawn("provider", argv, self.env())
        wait_plain(lambda: provider_up(self.provider_port), what="provider to listen", timeout=60)
        return child

    def start_relay(self) -> Child:
        argv = [sys.executable, "manage.py", "outbox_relay", "--loop", "--interval=0.1"]
        return self.spawn("relay", argv, self.env())

    def start_worker(self, name: str, **extra: str) -> Child:
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "jobsite",
            "worker",
            "--loglevel=INFO",
            "--queues=jobs",
            "--concurrency=1",
            "--pool=prefork",
            f"--hostname={name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        return self.spawn(name, argv, self.env(JOBS_WORKER_NAME=name, **extra))

    def stop(self, child: Child) -> None:
        child.stop()
        self.children.remove(child)

    def stop_all(self) -> None:
        for child in reversed(self.children):
            with contextlib.suppress(Exception):
                child.stop()
        self.children.clear()


def wait_plain(condition: Callable[[], Any], *, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def provider_call(port: int, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    import json

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method="POST" if data else "GET",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        result: dict[str, Any] = json.loads(response.read())
    return result


def provider_up(port: int) -> bool:
    try:
        provider_call(port, "/stats")
    except OSError:
        return False
    return True


def database_url() -> str:
    """The database this process uses, as a URL for the children."""
    s = connection.settings_dict
    auth = s["USER"] or "postgres"
    if s.get("PASSWORD"):
        auth += f":{s['PASSWORD']}"
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def point_celery_at(url: str) -> None:
    """Publish from this process (the fast path after submit) to the demo's broker."""
    from jobsite.celery import app

    app.conf.broker_url = url  # type: ignore[misc]
    pool = getattr(app, "_pool", None)
    if pool is not None:  # drop connections made to the default broker
        pool.force_close_all()
        app._pool = None  # type: ignore[attr-defined]


def stale_writes_logged(worker: Child) -> list[str]:
    """Which fenced writes a worker saw rejected ('heartbeat', 'complete', ...), from its log."""
    marker = "stale write rejected at "
    return [
        line.split(marker, 1)[1].strip() for line in worker.log().splitlines() if marker in line
    ]


@dataclass
class Check:
    drill: str
    expectation: str
    ok: bool
    detail: str = ""


@dataclass
class Accounting:
    accepted: int
    succeeded: int
    quarantined: int
    attempts: int
    duplicate_deliveries: int
    duplicate_effects: int
    effects_reused: int
    stale_writes_rejected: int
    notices_sent: int

    def line(self) -> str:
        return (
            f"accounting: accepted={self.accepted} succeeded={self.succeeded} "
            f"quarantined={self.quarantined} attempts={self.attempts} "
            f"duplicate_deliveries={self.duplicate_deliveries} "
            f"duplicate_effects={self.duplicate_effects}"
        )


@dataclass
class DemoReport:
    checks: list[Check] = field(default_factory=list)
    accounting: Accounting | None = None
    logs: Path | None = None

    @property
    def failed(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]


DRILLS = 4


class Demo:
    """Runs the drills against real processes and records what it checked."""

    def __init__(
        self, *, console: Console, broker_url: str | None, timeout: float, workdir: Path
    ) -> None:
        self.console = console
        self.timeout = timeout
        self.procs = Processes(workdir=workdir, database_url=database_url())
        self.given_broker = broker_url
        self.report = DemoReport(logs=workdir)
        self.job_ids: list[uuid.UUID] = []
        self.run_id = uuid.uuid4().hex[:6]
        self.signals_before: dict[tuple[str, str], int] = {}
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.overall = self.progress.add_task("drills", total=DRILLS)
        self.workers: dict[str, Child] = {}

    # -- narration and checks --------------------------------------------------------------
    def say(self, text: str) -> None:
        self.progress.console.print(text)

    def check(self, drill: str, expectation: str, ok: bool, detail: str = "") -> bool:
        self.report.checks.append(Check(drill, expectation, ok, detail))
        mark = "[green]✔[/green]" if ok else "[bold red]✘[/bold red]"
        self.say(f"   {mark} {expectation}" + (f" [dim]({detail})[/dim]" if detail else ""))
        return ok

    def wait(self, condition: Callable[[], Any], what: str, timeout: float | None = None) -> Any:
        """Poll with a deadline, running the reaper between polls (it is ours to run)."""
        self.progress.update(self.overall, description=f"waiting: {what}")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise DemoFailed(f"timed out waiting for {what}")
            reaped = jobs_reap()
            if reaped.expired:
                self.say(
                    f"   reaper: {reaped.expired} expired lease(s) -> "
                    f"{reaped.retried} retry, {reaped.quarantined} quarantined"
                )
            time.sleep(0.1)

    def signal_delta(self, name: str) -> int:
        return signal_values().get((name, ""), 0) - self.signals_before.get((name, ""), 0)

    # -- set-up ----------------------------------------------------------------------------
    def run(self) -> DemoReport:
        with self.progress:
            try:
                self.start_infrastructure()
                self.signals_before = signal_values()
                self.drill_crash_after_effect()
                self.drill_paused_worker()
                self.drill_malformed()
                self.drill_flaky_provider()
                self.report.accounting = self.account()
            finally:
                self.progress.update(self.overall, description="stopping what the demo started")
                self.procs.stop_all()
        return self.report

    def start_infrastructure(self) -> None:
        self.progress.update(self.overall, description="starting redis, provider, relay")
        if self.given_broker:
            self.procs.broker_url = self.given_broker
            self.say(f"broker: {self.given_broker} (given)")
        else:
            redis = self.procs.start_redis()
            self.say(f"broker: a private redis-server (pid {redis.pid}) at {self.procs.broker_url}")
        point_celery_at(self.procs.broker_url)
        provider = self.procs.start_provider()
        relay = self.procs.start_relay()
        self.say(
            f"notification provider (pid {provider.pid}) on :{self.procs.provider_port}; "
            f"outbox relay (pid {relay.pid}, manage.py outbox_relay --loop); "
            "reaper: this process"
        )

    def start_workers(self, *names: str, **extra: str) -> None:
        started = [self.procs.start_worker(name, **extra) for name in names]
        for child in started:

            def ready(c: Child = child) -> bool:
                return "ready." in c.log() or not c.alive()

            self.wait(
                ready,
                f"worker {child.name} to start",
                timeout=max(self.timeout, 90),
            )
            if not child.alive():
                raise DemoFailed(f"worker {child.name} died at start:\n{child.log()[-2000:]}")
            self.workers[child.name] = child
        self.say(
            "workers up: "
            + ", ".join(f"{c.name} (pid {c.pid}, pool child {child_pids(c.pid)})" for c in started)
        )

    def submit(self, kind: str, input: dict[str, Any], **extra: Any) -> Job:
        from django.contrib.auth import get_user_model

        import jobs

        owner, _ = get_user_model().objects.get_or_create(username="demo")
        job = jobs.submit(kind=kind, input=input, owner=owner, **extra)
        self.job_ids.append(job.pk)
        return job

    def job(self, job_id: uuid.UUID) -> Job:
        return Job.objects.get(pk=job_id)

    def finished_by(self, job_id: uuid.UUID) -> str:
        event = JobEvent.objects.filter(job_id=job_id, to_state="succeeded").first()
        return event.worker if event else ""

    # -- drill 1: job 84 ---------------------------------------------------------------------
    def drill_crash_after_effect(self) -> None:
        drill = "job 84"
        self.say("\n[bold]Drill 1 — job 84: the worker dies after its artifact and notice[/bold]")
        self.say(
            "   worker demo-a runs with JOBS_FAILPOINTS="
            "worker.after_effect_before_complete=exit (os._exit(137) before completing)"
        )
        self.start_workers("demo-a", JOBS_FAILPOINTS="worker.after_effect_before_complete=exit")
        job = self.submit(
            "demo.report",
            {"title": "Report 84", "rows": [[84, "ok"]], "reviewer": 47},
            business_key=f"report-84/{self.run_id}",
        )
        self.say(f"   submitted job 84 = {job.pk} (demo.report: report.generate's handler)")
        owner = self.wait(lambda: self.job(job.pk).lease_owner, "demo-a to claim job 84")
        pid = int(owner.rsplit(":", 1)[1])
        self.wait(lambda: not process_alive(pid), "demo-a's pool child to die")
        entry = EffectLedgerEntry.objects.get(job_id=job.pk, name="completion_notice")
        self.say(
            f"   demo-a pool child {pid} exited with 137 after: artifact stored, notice "
            f"'{entry.state}' in the ledger; job left '{self.job(job.pk).state}'"
        )
        self.procs.stop(self.workers.pop("demo-a"))
        self.say("   demo-a stopped; starting demo-b and demo-c (no failpoint)")
        self.start_workers("demo-b", "demo-c")
        self.wait(lambda: self.job(job.pk).state == "succeeded", "job 84 to succeed elsewhere")
        self.check_job_84(drill, job.pk)
        self.progress.advance(self.overall)

    def check_job_84(self, drill: str, job_id: uuid.UUID) -> None:
        done = self.job(job_id)
        worker = self.finished_by(job_id)
        self.check(
            drill,
            "redelivered and completed by a second worker",
            done.state == "succeeded" and not worker.startswith("demo-a"),
            f"attempt {done.attempt}, generation {done.generation}, by {worker}",
        )
        folder = (
            Path(settings.MEDIA_ROOT)
            / Path(artifact_name(job_id=job_id, input_version=1, name="x")).parent
        )
        files = sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        self.check(drill, "one artifact", files == ["report.md"], f"files: {files}")
        entry = EffectLedgerEntry.objects.get(job_id=job_id, name="completion_notice")
        stats = provider_call(self.procs.provider_port, "/stats")
        sent = stats["requests_by_key"].get(entry.idempotency_key, 0)
        self.check(
            drill,
            "one notice: the retry reused the ledger entry, no second call",
            entry.state == EffectState.APPLIED and entry.calls == 1 and sent == 1,
            f"ledger calls={entry.calls}, provider requests for its key={sent}, "
            f"effects reused +{self.signal_delta(EFFECTS_REUSED)}",
        )

    # -- drill 2: a paused worker ------------------------------------------------------------
    def drill_paused_worker(self) -> None:
        drill = "paused worker"
        self.say("\n[bold]Drill 2 — a worker paused past its lease[/bold]")
        job = self.submit("demo.slow", {"seconds": 4})
        owner = self.wait(lambda: self.job(job.pk).lease_owner, "a worker to claim the job")
        name, pid = owner.rsplit(":", 1)[0], int(owner.rsplit(":", 1)[1])
        os.kill(pid, signal.SIGSTOP)
        self.say(f"   SIGSTOP to {name}'s pool child {pid} (generation 1, lease 3 s)")
        self.wait(
            lambda: self.job(job.pk).state == "succeeded",
            "the lease to expire and another worker to finish it",
        )
        winner = self.finished_by(job.pk)
        self.say(
            f"   lease expired, reaper re-queued it, {winner} completed generation "
            f"{self.job(job.pk).generation}; now SIGCONT {pid}"
        )
        stale_before = self.signal_delta(STALE_WRITES_REJECTED)
        os.kill(pid, signal.SIGCONT)
        self.wait(
            lambda: self.signal_delta(STALE_WRITES_REJECTED) > stale_before,
            "the paused worker's late writes to be rejected",
        )
        done = self.job(job.pk)
        paused = self.workers[name]
        rejected = self.wait(lambda: stale_writes_logged(paused), f"{name} to log its rejection")
        self.check(
            drill,
            "the late worker's writes were rejected (fenced by generation)",
            True,
            f"{name} logged: {', '.join(rejected)}; stale_writes_rejected_total "
            f"+{self.signal_delta(STALE_WRITES_REJECTED)}",
        )
        result = done.result or {}
        self.check(
            drill,
            "the stored result is the new generation's",
            done.state == "succeeded"
            and result.get("generation") == done.generation
            and done.generation >= 2
            and winner.split(":")[0] != name,
            f"result generation {result.get('generation')}, finished by {winner}",
        )
        self.progress.advance(self.overall)

    # -- drill 3: malformed payload ----------------------------------------------------------
    def drill_malformed(self) -> None:
        drill = "malformed payload"
        self.say("\n[bold]Drill 3 — a malformed payload[/bold]")
        job = self.submit("drill.malformed", {"document_id": "not-a-number"})
        self.wait(lambda: self.job(job.pk).state == "quarantined", "the job to be quarantined")
        done = self.job(job.pk)
        record = QuarantineRecord.objects.get(job_id=job.pk)
        self.check(
            drill,
            "quarantined at once: a permanent failure is never retried",
            done.attempt == 1 and record.category == "permanent",
            f"attempts {done.attempt}, reason '{record.reason}', owner {record.responsible}",
        )
        self.progress.advance(self.overall)

    # -- drill 4: flaky provider -------------------------------------------------------------
    def drill_flaky_provider(self) -> None:
        drill = "flaky provider"
        self.say("\n[bold]Drill 4 — a flaky provider (503 twice)[/bold]")
        provider_call(self.procs.provider_port, "/control", {"fail_next": 2})
        job = self.submit("drill.notify", {})
        self.wait(lambda: self.job(job.pk).state == "succeeded", "the job to succeed")
        done = self.job(job.pk)
        delays = [
            event.details.get("delay_seconds")
            for event in JobEvent.objects.filter(job_id=job.pk, to_state="retry_wait")
        ]
        self.say(f"   retries after jittered delays (full jitter, capped): {delays} s")
        entry = EffectLedgerEntry.objects.get(job_id=job.pk, name="notice")
        stats = provider_call(self.procs.provider_port, "/stats")
        notices = stats["requests_by_key"].get(entry.idempotency_key, 0)
        self.check(
            drill,
            "retried with jitter, then succeeded",
            done.attempt == 3 and len(delays) == 2,
            f"attempts {done.attempt}, delays {delays}",
        )
        self.check(
            drill,
            "one notice, one key for every try",
            notices == 1 and entry.calls == 3,
            f"ledger calls={entry.calls}, notices created for the key={notices}",
        )
        self.progress.advance(self.overall)

    # -- accounting --------------------------------------------------------------------------
    def account(self) -> Accounting:
        jobs = list(Job.objects.filter(pk__in=self.job_ids))
        applied = EffectLedgerEntry.objects.filter(
            job_id__in=self.job_ids, state=EffectState.APPLIED, local=False
        ).count()
        stats = provider_call(self.procs.provider_port, "/stats")
        # The provider dedupes by key: a second notice for one effect would need a second key.
        extra_notices = max(int(stats["notices"]) - applied, 0)
        return Accounting(
            accepted=len(jobs),
            succeeded=sum(job.state == "succeeded" for job in jobs),
            quarantined=sum(job.state == "quarantined" for job in jobs),
            attempts=sum(job.attempt for job in jobs),
            duplicate_deliveries=self.signal_delta(DUPLICATE_DELIVERIES),
            duplicate_effects=extra_notices + self.signal_delta(DUPLICATE_EFFECTS),
            effects_reused=self.signal_delta(EFFECTS_REUSED),
            stale_writes_rejected=self.signal_delta(STALE_WRITES_REJECTED),
            notices_sent=int(stats["notices"]),
        )


def accounting_table(accounting: Accounting) -> Table:
    table = Table(title="accounting (from the database, the source of truth)")
    table.add_column("what")
    table.add_column("count", justify="right")
    rows = [
        ("accepted", accounting.accepted),
        ("succeeded", accounting.succeeded),
        ("quarantined (waiting for an operator)", accounting.quarantined),
        ("attempts (deliveries that ran the handler)", accounting.attempts),
        ("duplicate deliveries (acked without running)", accounting.duplicate_deliveries),
        ("stale writes rejected (fencing)", accounting.stale_writes_rejected),
        ("effects reused from the ledger", accounting.effects_reused),
        ("notices the provider created", accounting.notices_sent),
        ("duplicate effects", accounting.duplicate_effects),
    ]
    for name, value in rows:
        table.add_row(name, str(value))
    return table


WHERE_NEXT = """\
Where to look next (start the full service with `make run`):
  admin        http://127.0.0.1:8000/admin/   jobs, events, effect ledger, quarantine
  ops page     http://127.0.0.1:8000/ops/     backlog, oldest job, expired leases, quarantine
  Flower       http://127.0.0.1:5555          what the broker's events showed (in memory)
  metrics      http://127.0.0.1:8000/metrics  jobs_* counters for Prometheus
  the model    manage.py jobs_simulate --help  size workers for a burst before production"""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM runs the same clean-up as Ctrl-C."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def demo_run(
    *,
    console: Console,
    broker_url: str | None = None,
    timeout: float = 60.0,
    keep_logs: bool = False,
) -> DemoReport:
    """Run every drill; children are stopped before this returns or raises."""
    workdir = Path(tempfile.mkdtemp(prefix="jobs-demo-"))
    # The demo narrates the reaper itself; its INFO log line would only repeat it.
    logging.getLogger("jobs.reaper").setLevel(logging.WARNING)
    demo = Demo(console=console, broker_url=broker_url, timeout=timeout, workdir=workdir)
    failed = True
    try:
        with sigterm_as_interrupt():
            report = demo.run()
        failed = bool(report.failed)
        return report
    finally:
        if failed or keep_logs:
            console.print(f"process logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
