"""The drills: job 84, a paused worker, a malformed payload, a flaky provider."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from demo import demo_kinds  # noqa: F401  (registers demo.report and demo.slow here too)
from jobs.artifacts import artifact_name
from jobs.counters import (
    DUPLICATE_DELIVERIES,
    DUPLICATE_EFFECTS,
    EFFECTS_REUSED,
    STALE_WRITES_REJECTED,
    counter_values,
)
from jobs.models import (
    EffectLedgerEntry,
    EffectState,
    Job,
    JobEvent,
    QuarantineRecord,
)
from jobs.ops.workers import workers_live
from jobs.reaper import jobs_reap

from .processes import (
    Child,
    DemoFailed,
    Processes,
    child_pids,
    database_url,
    point_celery_at,
    process_alive,
    provider_call,
    stale_writes_logged,
)
from .report import Accounting, Check, DemoReport

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
        return counter_values().get((name, ""), 0) - self.signals_before.get((name, ""), 0)

    # -- set-up ----------------------------------------------------------------------------
    def run(self) -> DemoReport:
        with self.progress:
            try:
                self.start_infrastructure()
                self.signals_before = counter_values()
                self.drill_crash_after_effect()
                self.drill_paused_worker()
                self.drill_malformed()
                self.drill_flaky_provider()
                self.report.accounting = self.account()
            finally:
                self.progress.update(self.overall, description="stopping what the demo started")
                # A second Ctrl-C must not cut the clean-up short: every child gets stopped.
                previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
                try:
                    self.procs.stop_all()
                finally:
                    signal.signal(signal.SIGINT, previous)
        return self.report

    def warn_if_shared(self) -> None:
        """Another deployment's relay and beat on this database would take the demo's retries."""
        # Live by the workers' own rule: a stopped `make run` removed its rows, a killed one
        # stops counting a couple of heartbeat intervals after its last write.
        others = sorted(
            workers_live().exclude(name__startswith="demo-").values_list("name", flat=True)
        )
        if others:
            self.say(
                f"[yellow]warning: workers {', '.join(others)} use this database too (a `make "
                "run`?): their relay may hand the demo's retries to workers without the demo "
                "kinds. Give the demo its own DATABASE_URL.[/yellow]"
            )

    def start_infrastructure(self) -> None:
        self.warn_if_shared()
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
        name, pid = owner.split(":", 1)[0], int(owner.rsplit(":", 1)[1])  # name:nonce:pid
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
