"""Faults for the chaos soak, from a seeded schedule, and the recovery loop they rely on.

Every fault restores what it touched (SIGCONT after SIGSTOP, a restarted process after a
kill, a restarted server after a stop) in a `finally`, so a failing run never leaves a
stopped worker or a dead server behind.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from tests.chaos.private_pg import PrivatePostgres
from tests.harness import Harness, PrivateRedis, Proc, queue_envelopes

logger = logging.getLogger(__name__)

WORKER_APP_PREFIX = "chaos-worker"
# A periodic schedule in the mix: every second, ticked by the maintenance process (only its
# environment defines it, in JOBS_SCHEDULES), caught up in full after every fault; the soak
# pauses it before the drain and checks each tick ran once (tests.chaos.checker).
SOAK_SCHEDULE = "chaos-tick"
SOAK_SCHEDULES = {
    SOAK_SCHEDULE: {
        "kind": "chaos.sleep",
        "cron": "* * * * * *",
        "catch_up": "all",
        "input": {"seconds": 0.05},
    }
}
LEASE_SECONDS = 2.0  # the chaos kinds' lease; a SIGSTOP must outlast it

FAULTS: tuple[str, ...] = (
    "kill_worker_child",
    "kill_worker_main",
    "stop_worker_past_lease",
    "kill_relay",
    "kill_maintenance",
    "restart_redis",
    "restart_postgres",
    "terminate_worker_connections",
    "provider_timeout_after_accept",
)
# Process faults are the common case; server restarts are rarer, as in life.
WEIGHTS: dict[str, int] = {
    "kill_worker_child": 4,
    "kill_worker_main": 2,
    "stop_worker_past_lease": 3,
    "kill_relay": 2,
    "kill_maintenance": 1,
    "restart_redis": 1,
    "restart_postgres": 1,
    "terminate_worker_connections": 2,
    "provider_timeout_after_accept": 2,
}


def fault_schedule(rng: random.Random, *, duration: float, every: float) -> list[tuple[float, str]]:
    """(offset seconds, fault) pairs; every fault type appears once before any repeats."""
    names = list(FAULTS)
    rng.shuffle(names)
    schedule: list[tuple[float, str]] = []
    at = every * rng.uniform(0.5, 1.0)
    while at < duration:
        name = names.pop(0) if names else rng.choices(FAULTS, [WEIGHTS[f] for f in FAULTS])[0]
        schedule.append((round(at, 2), name))
        at += every * rng.uniform(0.6, 1.4)
    return schedule


@dataclass
class Cluster:
    """Every process and server of one soak; faults act on it, `stop()` ends it all."""

    harness: Harness
    redis: PrivateRedis
    pg: PrivatePostgres
    worker_count: int
    concurrency: int = 2
    workers: list[Proc] = field(default_factory=list)
    relay: Proc | None = None
    maintenance: Proc | None = None
    provider: Proc | None = None
    started_workers: int = 0
    retention: float = 0.0  # > 0: the maintenance process prunes jobs (maintenance_loop)
    outbox_retention: float = 0.0  # > 0: ... and published outbox rows
    killed: set[int] = field(default_factory=set)
    buried: set[int] = field(default_factory=set)
    deaths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def worker_env(self, name: str) -> dict[str, str]:
        return {
            "JOBS_HANDLER_MODULES": "tests.kinds_chaos",
            "NOTIFY_PROVIDER_TIMEOUT": "1",
            "PGAPPNAME": f"{WORKER_APP_PREFIX}-{name}",
            # Orphaned unacked messages come back within the soak; the limit stays below it.
            "JOBS_VISIBILITY_TIMEOUT": "120",
            "JOBS_TASK_TIME_LIMIT": "60",
            "JOBS_TASK_SOFT_TIME_LIMIT": "50",
        }

    def start_worker(self, *, wait: bool = True) -> Proc:
        with self.lock:
            self.started_workers += 1
            name = f"w{self.started_workers}"
        proc = self.harness.start_worker(
            name, concurrency=self.concurrency, wait=wait, env=self.worker_env(name)
        )
        with self.lock:
            self.workers.append(proc)
        return proc

    def start_relay(self) -> Proc:
        self.relay = self.harness.start_relay(
            interval=0.2, PGAPPNAME="chaos-relay", LOG_LEVEL="WARNING"
        )
        return self.relay

    def start_maintenance(self) -> Proc:
        """The beat's job: reap expired leases and re-enqueue work the broker lost."""
        import sys

        argv = [sys.executable, "-m", "tests.chaos.soak", "--maintenance"]
        env = self.harness.base_env(
            PGAPPNAME="chaos-maintenance",
            JOBS_HANDLER_MODULES="tests.kinds_chaos",
            JOBS_SCHEDULES=json.dumps(SOAK_SCHEDULES),
            LOG_LEVEL="WARNING",
            CHAOS_RETENTION_SECONDS=str(self.retention),
            CHAOS_OUTBOX_RETENTION_SECONDS=str(self.outbox_retention),
        )
        self.maintenance = self.harness.spawn(f"maintenance-{len(self.harness.procs)}", argv, env)
        return self.maintenance

    def start_all(self, *, workers: bool = True) -> None:
        self.provider = self.harness.start_provider()
        self.start_relay()
        self.start_maintenance()
        if workers:
            self.start_workers()

    def start_workers(self) -> None:
        """Boot them side by side (a worker takes seconds to start on a busy machine)."""
        from tests.harness import wait_until

        procs = [self.start_worker(wait=False) for _ in range(self.worker_count)]
        for proc in procs:
            wait_until(
                proc.ready_or_exited,
                timeout=90,
                what=f"worker {proc.name} to be ready",
            )
            if not proc.alive():
                raise RuntimeError(f"worker {proc.name} died at start:\n{proc.log()[-3000:]}")

    def supervise(self) -> list[str]:
        """Restart workers that died without a fault killing them (systemd's Restart=), and
        say why they died: the first line of the fatal error in their log."""
        with self.lock:
            dead = [
                w
                for w in self.workers
                if not w.alive() and w.pid not in self.killed and w.pid not in self.buried
            ]
            self.buried.update(w.pid for w in dead)
        found = []
        for worker in dead:
            fatal = [ln for ln in worker.log().splitlines() if "Unrecoverable error" in ln]
            why = fatal[0].split("CRITICAL", 1)[-1].strip() if fatal else worker.log()[-300:]
            found.append(f"{worker.name} exited {worker.popen.returncode}: {why}")
            self.start_worker(wait=False)
        self.deaths.extend(found)
        return found

    def alive_workers(self) -> list[Proc]:
        with self.lock:
            return [w for w in self.workers if w.alive()]

    def stop(self) -> None:
        for proc in self.harness.procs:
            with contextlib.suppress(ProcessLookupError):
                if proc.alive():
                    os.kill(proc.pid, signal.SIGCONT)
                    for child in proc.children():
                        os.kill(child, signal.SIGCONT)
        self.harness.stop_all()


def _kill_tree(proc: Proc) -> None:
    children = proc.children()
    proc.signal(signal.SIGKILL)
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.popen.wait(timeout=10)


class FaultInjector:
    """Runs one named fault against the cluster and returns what it did."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.counts: Counter[str] = Counter()
        self.log: list[tuple[float, str, str]] = []

    def inject(self, name: str) -> str:
        fn: Callable[[], str] = getattr(self, name)
        try:
            detail = fn()
        except Exception as exc:  # a fault that could not be applied is reported, not fatal
            detail = f"not applied: {type(exc).__name__}: {exc}"
        else:
            self.counts[name] += 1
        self.log.append((time.time(), name, detail))
        return detail

    def _pick_worker(self) -> Proc:
        from tests.harness import wait_until

        workers: list[Proc] = wait_until(
            self.cluster.alive_workers, timeout=60, interval=0.2, what="a live worker"
        )
        return self.rng.choice(workers)

    def _busy_child(self) -> tuple[Proc, int]:
        """A pool child that holds a lease right now (its name is in jobs_job.lease_owner),
        else any child: a fault on an idle process proves little."""
        from django.db import close_old_connections

        from jobs.models import Job

        owners: list[str | None] = []
        try:
            owners = list(
                Job.objects.filter(state="leased").values_list("lease_owner", flat=True)[:200]
            )
        except Exception:  # the database may be the thing that is down
            close_old_connections()
        busy = {int(o.rsplit(":", 1)[1]) for o in owners if o and o.rsplit(":", 1)[-1].isdigit()}
        from tests.harness import wait_until

        # A worker the supervisor just restarted has no pool yet: wait for one.
        pairs: list[tuple[Proc, int]] = wait_until(
            lambda: [(w, c) for w in self.cluster.alive_workers() for c in w.children()],
            timeout=60,
            interval=0.2,
            what="a live pool child",
        )
        running = [(w, c) for w, c in pairs if c in busy]
        return self.rng.choice(running or pairs)

    def kill_worker_child(self) -> str:
        worker, child = self._busy_child()
        os.kill(child, signal.SIGKILL)  # the pool replaces it; its task is redelivered
        return f"SIGKILL {worker.name} child {child}"

    def kill_worker_main(self) -> str:
        worker = self._pick_worker()
        self.cluster.killed.add(worker.pid)
        try:
            _kill_tree(worker)  # a machine loss: main and children die at once
        finally:
            self.cluster.start_worker()
        return f"SIGKILL {worker.name} main+children, started a new worker"

    def stop_worker_past_lease(self) -> str:
        worker, child = self._busy_child()
        targets = [child, worker.pid] if self.rng.random() < 0.5 else [child]
        pause = LEASE_SECONDS + self.rng.uniform(1.5, 3.0)
        try:
            for pid in targets:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            time.sleep(pause)  # the fault itself: the worker is frozen past its lease
        finally:
            for pid in targets:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        what = "main+child" if len(targets) == 2 else "child"
        return f"SIGSTOP {worker.name} {what} {child} for {pause:.1f}s, then SIGCONT"

    def kill_relay(self) -> str:
        relay = self.cluster.relay
        try:
            if relay is not None:
                _kill_tree(relay)
        finally:
            self.cluster.start_relay()
        return "SIGKILL relay, restarted"

    def kill_maintenance(self) -> str:
        maintenance = self.cluster.maintenance
        try:
            if maintenance is not None:
                _kill_tree(maintenance)
        finally:
            self.cluster.start_maintenance()
        return "SIGKILL reaper/reconciler, restarted"

    def restart_redis(self) -> str:
        self.cluster.redis.restart()  # queues and unacked messages are gone
        return "redis restarted (queues lost)"

    def restart_postgres(self) -> str:
        down = self.rng.uniform(0.5, 2.0)
        try:
            self.cluster.pg.stop(mode="immediate")
            time.sleep(down)  # the outage itself
        finally:
            self.cluster.pg.start()
        return f"postgres crashed (immediate stop), down {down:.1f}s, restarted"

    def terminate_worker_connections(self) -> str:
        n = self.cluster.pg.terminate_backends(application_prefix=WORKER_APP_PREFIX)
        return f"pg_terminate_backend on {n} worker connections"

    def provider_timeout_after_accept(self) -> str:
        k = self.rng.randint(1, 4)
        self.cluster.harness.provider_control(timeout_after_accept=k, stall_seconds=2.5)
        return f"provider: next {k} new notices accepted, then the answer stalls past timeout"


class FaultRunner(threading.Thread):
    """Plays the schedule against the cluster, in real time, until done or stopped."""

    def __init__(self, injector: FaultInjector, schedule: list[tuple[float, str]]) -> None:
        super().__init__(name="fault-runner", daemon=True)
        self.injector = injector
        self.schedule = schedule
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        for offset, name in self.schedule:
            if self.stopping.wait(max(0.0, started + offset - time.monotonic())):
                return
            detail = self.injector.inject(name)
            logger.info("fault t=%.1fs %s: %s", time.monotonic() - started, name, detail)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)


# --- recovery: what beat does (reaper + reconciler), as one restartable process ----------


def broker_waiting_job_ids(redis_url: str, queue: str = "jobs") -> set[str] | None:
    """Job ids of the messages waiting in the broker's queue; None when it cannot be read."""
    import redis

    try:
        raw = queue_envelopes(redis.Redis.from_url(redis_url, socket_timeout=5), queue)
    except redis.RedisError:
        return None
    ids: set[str] = set()
    for item in raw:
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            kwargs = json.loads(base64.b64decode(json.loads(item)["body"]))[1]
            # A batch message (jobs.execute_many) carries several jobs' kwargs.
            ids.update(str(one["job_id"]) for one in kwargs.get("items", [kwargs]))
    return ids


def repair_lost_work(*, redis_url: str, stale_after: float = 4.0) -> int:
    """Re-enqueue lost work (jobs.ops.reconcile, the code of `jobs_reconcile --repair`),
    skipping jobs whose message is still waiting in line.

    The reconciler alone cannot tell "lost" from "waiting behind a backlog", so it needs a
    long `stale_after` to avoid flooding the queue with duplicates. Reading the queue lets the
    soak use a short one: a job due for `stale_after`, all its rows published that long ago,
    not leased and not in the queue has no message anyone will deliver.
    """
    from jobs.ops.reconcile import lost_job_ids, reconcile_repair_lost

    candidates = lost_job_ids(stale_after=stale_after)
    if not candidates:
        return 0
    waiting = broker_waiting_job_ids(redis_url)
    if waiting is None:
        return 0  # broker down: nothing can be sent anyway
    lost = [pk for pk in candidates if str(pk) not in waiting]
    if not lost:
        return 0
    return len(reconcile_repair_lost(stale_after=stale_after, job_ids=lost))


def maintenance_loop(
    *, interval: float = 0.5, reconcile_every: float = 2.0, prune_every: float = 2.0
) -> None:
    """Reap expired leases and tick the schedules every `interval`; repair lost work every
    `reconcile_every`; prune every `prune_every` when the environment says so: finished jobs
    older than CHAOS_RETENTION_SECONDS, published outbox rows older than
    CHAOS_OUTBOX_RETENTION_SECONDS (what beat's jobs.maintenance.prune and outbox.prune do,
    with retentions short enough to meet the faults).

    Repair is `repair_lost_work` (jobs.ops.reconcile plus a look at the queue), in-process
    so a round costs milliseconds. The look at the queue lets a job wait behind a backlog with
    no new row, for as long as the backlog lasts. A job's published row is its proof that it
    had a message (jobs.ops.reconcile); `outbox_prune` keeps each job's newest row however old,
    so any outbox retention is safe (docs/fault-matrix.md, Finding 5: before that, a 10 s
    retention stranded 1,768 jobs after a Redis restart).
    """
    from django.conf import settings
    from django.db import close_old_connections

    from jobs.reaper import jobs_reap
    from jobs.retention import jobs_prune
    from jobs.scheduler import schedules_tick
    from outbox.services import outbox_prune

    retention = timedelta(seconds=float(os.environ.get("CHAOS_RETENTION_SECONDS") or 0))
    outbox_retention = float(os.environ.get("CHAOS_OUTBOX_RETENTION_SECONDS") or 0)
    last_reconcile = last_prune = 0.0
    while True:
        try:
            jobs_reap()
            schedules_tick()
            if time.monotonic() - last_prune > prune_every:
                last_prune = time.monotonic()
                if retention:
                    jobs_prune(older_than=retention, batch=200, budget_seconds=1.0)
                if outbox_retention:
                    outbox_prune(older_than=timedelta(seconds=outbox_retention), batch=500)
            if time.monotonic() - last_reconcile > reconcile_every:
                last_reconcile = time.monotonic()
                repaired = repair_lost_work(redis_url=settings.CELERY_BROKER_URL)
                if repaired:
                    logger.warning("re-enqueued %d jobs the broker lost", repaired)
        except Exception as exc:  # database or broker down: say so, wait, try again
            logger.warning("maintenance error: %s: %s", type(exc).__name__, exc)
            close_old_connections()
        time.sleep(interval)
