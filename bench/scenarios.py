"""The measurements. Contenders always run interleaved in one run; ratios are taken per round.

Runs inside the driver process, after django.setup() with DATABASE_URL on the main bench
database and CELERY_BROKER_URL on the private Redis (see run_all.py).
"""

from __future__ import annotations

import os
import queue
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.infra import (
    Fleet,
    PrivateRedis,
    Proc,
    RedisCounters,
    db_name,
    db_url,
    ensure_database,
    median,
    pct,
    pg_connect,
    poll,
    settled_commits,
    vacuum,
    wait_until,
)
from bench.pgcpu import PgCpuMeter, note_backend
from outbox import fastpath, marks

E2E_TIMEOUT = 180.0
SERIAL_MIN_ROUNDS = 7  # scenario_serial's pairs of rounds, whatever --rounds says
REUSE_BROKER_DB = 3  # the proposal's workers listen on their own Redis DB number


class Submitters:
    """Driver threads that live across rounds, as a web server's threads do: each keeps its
    database connection (a thread per round would pay a connection, its set-up and its first
    statement preparations every round). One pool per database `use_target` points at, so
    rounds that alternate between databases keep their connections too; the threads close
    them when the pool closes (`close_driver_db`)."""

    def __init__(self, threads: int) -> None:
        self.inboxes: list[queue.Queue[tuple[int, Callable[[], Any]] | None]] = [
            queue.Queue() for _ in range(threads)
        ]
        self.done: queue.Queue[BaseException | None] = queue.Queue()
        self.threads = [
            threading.Thread(target=self._run, args=(inbox,), daemon=True, name=f"submitter-{i}")
            for i, inbox in enumerate(self.inboxes)
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, inbox: queue.Queue[tuple[int, Callable[[], Any]] | None]) -> None:
        while True:
            item = inbox.get()
            if item is None:
                _close_thread_connection()
                self.done.put(None)
                return
            count, submit = item
            try:
                for _ in range(count):
                    submit()
            except BaseException as exc:  # surfaced by run(): a failed submit fails the round
                self.done.put(exc)
            else:
                self.done.put(None)

    def run(self, n: int, submit: Callable[[], Any]) -> None:
        threads = len(self.inboxes)
        share = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
        for inbox, count in zip(self.inboxes, share, strict=True):
            inbox.put((count, submit))
        errors = [e for e in (self.done.get() for _ in self.inboxes) if e is not None]
        if errors:
            raise errors[0]

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for _ in self.inboxes:
            self.done.get()
        for thread in self.threads:
            thread.join(10)


_submitters: dict[tuple[int, str], Submitters] = {}  # (threads, database) -> pool


def _close_thread_connection() -> None:
    from django.db import connection

    if connection.connection is not None:
        note_backend(connection.connection.info.backend_pid)
    connection.close()


def submit_many(n: int, submit: Callable[[], Any], threads: int) -> None:
    """Call submit() n times from `threads` threads (a web tier has many submitters)."""
    if threads <= 1:
        for _ in range(n):
            submit()
        return
    from django.db import connections

    key = (threads, str(connections["default"].settings_dict["NAME"]))
    pool = _submitters.get(key)
    if pool is None:
        pool = _submitters[key] = Submitters(threads)
    pool.run(n, submit)


@dataclass
class Bench:
    """What every scenario shares: the private broker, the subprocesses, the sizes."""

    redis: PrivateRedis
    counters: RedisCounters
    fleet: Fleet
    jobs: int
    rounds: int
    submitters: int
    concurrencies: list[int]
    quick: bool
    backlog: int = 10_000  # jobs of the backlog drain and of submit_many
    results: dict[str, Any] = field(default_factory=dict)

    def broker(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.redis.port}/{db}"


def log(message: str) -> None:
    print(message, flush=True)


# --- driver-side targets ------------------------------------------------------------------


def use_target(db: str, broker: str) -> None:
    """Point this process's Django connection and Celery producer at (db, broker)."""
    from django.db import connections

    from jobsite.celery import app

    app.set_current()  # outbox.transport publishes through the current app: ours
    # Rows the fast path holds, and their marks, belong to the database we leave: publish and
    # mark them there (the mark thread keeps the connection it opened first).
    fastpath.flush()
    marks.stop()
    conn = connections["default"]
    conn.close()
    conn.settings_dict["NAME"] = db
    if app.conf.broker_url != broker:
        # Celery reads CELERY_BROKER_URL from the environment before its own conf.
        os.environ["CELERY_BROKER_URL"] = broker
        # kombu keeps one global pool per broker URL: drop our handles, never close them.
        app.conf.broker_url = broker
        app._pool = None
        app.amqp._producer_pool = None


def set_setting(name: str, value: Any) -> None:
    """Change a Django setting in this process, as override_settings does.

    outbox_settings and jobs_settings cache each value until Django's `setting_changed` says
    it moved: assigning settings.OUTBOX_FAST_PATH alone would change nothing."""
    from django.conf import settings
    from django.core.signals import setting_changed

    setattr(settings, name, value)
    setting_changed.send(sender=type(settings), setting=name, value=value, enter=True)


def set_fast_path(on: bool) -> None:
    """Turn the outbox fast path on or off in this process."""
    set_setting("OUTBOX_FAST_PATH", on)


def close_driver_db() -> None:
    from django.db import connections

    while _submitters:
        _submitters.popitem()[1].close()
    connections.close_all()


def bench_owner() -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="bench")
    return user


def durable_submit(owner: Any) -> str:
    import jobs

    return str(jobs.submit(kind="noop", input={}, owner=owner).pk)


def raw_submit() -> None:
    from bench.raw_app import noop

    noop.delay(job_id=str(uuid.uuid4()), generation=0)


def durable_worker(
    b: Bench, name: str, concurrency: int, db: str, broker_db: int = 0, app: str = "jobsite"
) -> Proc:
    env = b.fleet.env(
        DATABASE_URL=db_url(db), CELERY_BROKER_URL=b.broker(broker_db), JOBS_WORKER_NAME=name
    )
    return b.fleet.celery_worker(name, app=app, queue="jobs", concurrency=concurrency, env=env)


def raw_worker(b: Bench, concurrency: int) -> Proc:
    env = b.fleet.env(BENCH_BROKER_URL=b.broker())
    return b.fleet.celery_worker(
        f"raw{concurrency}", app="bench.raw_app", queue="raw", concurrency=concurrency, env=env
    )


# --- one round of each contender ----------------------------------------------------------


@dataclass
class Round:
    contender: str
    jobs: int
    seconds: float
    broker_commands: int = 0
    pg_ms: float = float("nan")  # CPU of the contender's database backends (bench/pgcpu.py)
    messages: int = 0  # broker messages that carried the jobs

    @property
    def throughput(self) -> float:
        return self.jobs / self.seconds


def broker_round(b: Bench, name: str, n: int, submit: Callable[[], Any]) -> Round:
    """Submit n jobs and stop the clock when the broker acked every message they made.

    Durable submits from concurrent threads may share messages (with company, the fast
    path's publisher packs rows: outbox/fastpath.py), so the messages to wait for are the
    publishes (LPUSH) seen once every submit returned and the publisher flushed, not n."""
    info_before = b.counters.info_calls
    commands_before = b.counters.commands()
    acks_before = b.counters.acks()
    published_before = b.counters.publishes()
    started = time.perf_counter()
    submit_many(n, submit, b.submitters)
    fastpath.flush()  # rows the publisher still lingers on go now: every message is counted
    messages = b.counters.publishes() - published_before
    done = poll(
        lambda: b.counters.acks() - acks_before >= messages,
        timeout=E2E_TIMEOUT,
        interval=0.005,
        what=f"{messages} acks of {name} ({n} jobs)",
    )
    polls = b.counters.info_calls - info_before
    commands = b.counters.commands() - commands_before - polls
    return Round(name, n, done - started, commands, messages=messages)


class ProcrastinateDriver:
    """Defers Procrastinate no-op jobs and counts them done, on its own database."""

    def __init__(self, db: str) -> None:
        from bench import proc_app

        self.db = db
        self.app = proc_app.app
        self.task = proc_app.noop
        self.polls = 0
        self.conn: Any = None

    def open(self) -> None:
        self.app.open()
        self.conn = pg_connect(self.db)

    def close(self) -> None:
        self.app.close()
        self.conn.close()

    def max_id(self) -> int:
        self.polls += 1
        row = self.conn.execute("SELECT coalesce(max(id), 0) FROM procrastinate_jobs").fetchone()
        return int(row[0]) if row else 0

    def done_since(self, start_id: int) -> int:
        self.polls += 1
        row = self.conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE id > %s AND status = 'succeeded'",
            [start_id],
        ).fetchone()
        return int(row[0]) if row else 0

    def round(self, n: int, submitters: int) -> Round:
        start_id = self.max_id()
        started = time.perf_counter()
        submit_many(n, lambda: self.task.defer(job_id=str(uuid.uuid4())), submitters)
        done = poll(
            lambda: self.done_since(start_id) >= n,
            timeout=E2E_TIMEOUT,
            interval=0.005,
            what=f"{n} procrastinate jobs",
        )
        return Round("procrastinate", n, done - started)


def ensure_procrastinate_schema(db: str) -> None:
    ensure_database(db, migrate=False)
    with pg_connect(db) as conn:
        row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
    if row and row[0]:
        return
    from bench import proc_app

    with proc_app.app.open():
        proc_app.app.schema_manager.apply_schema()


def procrastinate_worker(b: Bench, db: str, concurrency: int) -> Proc:
    env = b.fleet.env(BENCH_PROCRASTINATE_DSN=f"postgresql://postgres@127.0.0.1:5432/{db}")
    argv = [
        sys.executable,
        "-m",
        "procrastinate",
        "--app=bench.proc_app.app",
        "worker",
        "--queues=bench",
        f"--concurrency={concurrency}",
    ]
    return b.fleet.spawn(f"procrastinate{concurrency}", argv, env)


# --- 1. submit ----------------------------------------------------------------------------


def scenario_submit(b: Bench) -> dict[str, Any]:
    """jobs.submit (fast path on and off) vs a bare task.delay(), interleaved, no workers."""
    import outbox.relay as relay

    main = db_name("main")
    use_target(main, b.broker())
    owner = bench_owner()
    n = b.jobs
    fast_publish: list[float] = []
    real_publish = relay.outbox_publish_after_commit

    def timed_publish(rows: list[Any]) -> None:
        started = time.perf_counter()
        real_publish(rows)
        fast_publish.append(time.perf_counter() - started)

    def durable(fast: bool) -> Callable[[], Any]:
        def call() -> Any:
            set_fast_path(fast)
            return durable_submit(owner)

        return call

    contenders: dict[str, Callable[[], Any]] = {
        "submit_fast": durable(True),
        "submit_relay_only": durable(False),
        "delay": raw_submit,
    }
    latencies: dict[str, list[list[float]]] = {k: [] for k in contenders}
    rates: dict[str, list[float]] = {k: [] for k in contenders}
    relay.outbox_publish_after_commit = timed_publish  # type: ignore[assignment]
    try:
        for warm in contenders.values():
            for _ in range(20):
                warm()
        for r in range(b.rounds):
            order = list(contenders)
            order = order[r % len(order) :] + order[: r % len(order)]
            for name in order:
                call = contenders[name]
                lat = []
                started = time.perf_counter()
                for _ in range(n):
                    t0 = time.perf_counter()
                    call()
                    lat.append(time.perf_counter() - t0)
                rates[name].append(n / (time.perf_counter() - started))
                latencies[name].append(lat)
    finally:
        relay.outbox_publish_after_commit = real_publish  # type: ignore[assignment]
        set_fast_path(True)
    _drain_unpublished(b)
    out: dict[str, Any] = {"jobs_per_round": n, "rounds": b.rounds}
    for name in contenders:
        flat = [x for lat in latencies[name] for x in lat]
        out[name] = {
            "jobs_per_s": median(rates[name]),
            "p50_ms": pct(flat, 50) * 1000,
            "p99_ms": pct(flat, 99) * 1000,
        }
    out["ratio_submit_fast_vs_delay"] = median(
        [a / c for a, c in zip(rates["submit_fast"], rates["delay"], strict=True)]
    )
    out["fast_path_publish_ms_p50"] = pct(fast_publish, 50) * 1000
    out["fast_path_publish_ms_p99"] = pct(fast_publish, 99) * 1000
    return out


def _drain_unpublished(b: Bench) -> None:
    """Leave no unpublished row behind (it would load later scenarios), then drop messages."""
    from outbox.relay import outbox_relay_batch

    while outbox_relay_batch(limit=1000).reserved:
        pass
    b.counters.flush()


# --- 2. relay throughput ------------------------------------------------------------------


def scenario_relay(b: Bench) -> dict[str, Any]:
    """outbox_relay_batch rows/s on a backlog (fast path off); the fast path per row."""
    from outbox.conf import outbox_settings
    from outbox.relay import outbox_relay_batch

    main = db_name("main")
    use_target(main, b.broker())
    owner = bench_owner()
    backlog = b.jobs * 2
    rates = []
    set_fast_path(False)
    try:
        for _ in range(b.rounds):
            for _ in range(backlog):
                durable_submit(owner)
            published = 0
            started = time.perf_counter()
            while True:
                result = outbox_relay_batch()
                published += result.published
                if not result.reserved:
                    break
            rates.append(published / (time.perf_counter() - started))
            b.counters.flush()
    finally:
        set_fast_path(True)
    return {
        "backlog_rows": backlog,
        "batch_size": outbox_settings.RELAY_BATCH_SIZE,
        "rows_per_s": median(rates),
        "rounds": rates,
    }


# --- 5. latency (and 2. commit-to-publish) ------------------------------------------------


def scenario_latency(b: Bench, *, with_reuse: bool = False) -> dict[str, Any]:
    """Accept -> start and commit -> publish, fast path vs relay loop alone, paced submits;
    and call -> start for both and for raw Celery's no-op on a worker of the same shape
    (prefork, 2 processes, prefetch 1, acks_late): the floor that a message, Celery's main
    process and a pool process set on this machine, without the database; and Procrastinate's
    accept -> start on its worker of 2 (`_procrastinate_paced`), the issue's other baseline.

    with_reuse adds a third mode: the fast path with bench/reuse_app.py's worker (its own
    database and Redis DB number).
    """
    from outbox.conf import outbox_settings

    main = db_name("main")
    rdb = db_name("reuse")
    interval = 1.0
    targets = {"fast": (main, 0), "relay_only": (main, 0)}
    if with_reuse:
        ensure_database(rdb)
        targets["fast_reuse"] = (rdb, REUSE_BROKER_DB)
    owners = {}
    for mode, (db, broker_db) in targets.items():
        use_target(db, b.broker(broker_db))
        owners[mode] = bench_owner()
    stamps = os.path.join(tempfile.mkdtemp(prefix="bench-raw-stamps-"), "started")
    procs = [
        durable_worker(b, "lat", 2, main),
        b.fleet.spawn(
            "relay",
            [sys.executable, "manage.py", "outbox_relay", "--loop", f"--interval={interval}"],
            b.fleet.env(DATABASE_URL=db_url(main), CELERY_BROKER_URL=b.broker()),
        ),
        b.fleet.celery_worker(
            "rawlat",
            app="bench.raw_app",
            queue="raw",
            concurrency=2,
            env=b.fleet.env(BENCH_BROKER_URL=b.broker(), BENCH_RAW_STAMP_FILE=stamps),
        ),
    ]
    if with_reuse:
        procs.append(durable_worker(b, "latreuse", 2, rdb, REUSE_BROKER_DB, app="bench.reuse_app"))
    pdb = db_name("procrastinate")
    ensure_procrastinate_schema(pdb)
    procs.append(procrastinate_worker(b, pdb, 2))
    proc = ProcrastinateDriver(pdb)
    proc.open()
    per_round = 30 if b.quick else 50
    rng = random.Random(6)
    sample_names = ("start", "publish", "submit_call", "return_to_start", "call_to_start")
    samples: dict[str, dict[str, list[float]]] = {
        mode: {name: [] for name in sample_names} for mode in [*targets, "raw", "procrastinate"]
    }
    batched = dict.fromkeys(targets, 0)  # jobs claimed by a batch message, not jobs.execute
    conns = {db: pg_connect(db) for db, _ in targets.values()}
    try:
        _procrastinate_paced(proc, 3, rng)  # its worker is up and listening before the rounds
        for r in range(b.rounds):
            modes = [*targets, "raw", "procrastinate"]
            modes = modes[r % len(modes) :] + modes[: r % len(modes)]
            for mode in modes:
                if mode == "raw":
                    samples["raw"]["call_to_start"] += _raw_call_to_start(stamps, per_round, rng)
                    continue
                if mode == "procrastinate":
                    for name, values in _procrastinate_paced(proc, per_round, rng).items():
                        samples[mode][name] += values
                    continue
                db, broker_db = targets[mode]
                conn = conns[db]
                use_target(db, b.broker(broker_db))
                set_fast_path(mode != "relay_only")
                owner = owners[mode]
                called, returned = _paced(per_round, rng, lambda o=owner: durable_submit(o))
                ids = list(called)

                def started_all(ids: list[str] = ids, conn: Any = conn) -> bool:
                    row = conn.execute(
                        "SELECT count(*) FROM jobs_job WHERE id = ANY(%s::uuid[]) "
                        "AND state = 'succeeded'",
                        [ids],
                    ).fetchone()
                    return bool(row) and int(row[0]) == len(ids)

                wait_until(started_all, timeout=120, interval=0.1, what=f"{mode} jobs to run")
                start_rows = conn.execute(
                    "SELECT extract(epoch FROM min(e.at) - j.created_at), j.id::text, "
                    "extract(epoch FROM j.created_at), extract(epoch FROM min(e.at)) "
                    "FROM jobs_job j "
                    "JOIN jobs_jobevent e ON e.job_id = j.id AND e.to_state = 'leased' "
                    "WHERE j.id = ANY(%s::uuid[]) GROUP BY j.id, j.created_at",
                    [ids],
                ).fetchall()
                for _, job_id, created, leased in start_rows:
                    samples[mode]["submit_call"].append(returned[job_id] - float(created))
                    samples[mode]["return_to_start"].append(float(leased) - returned[job_id])
                    samples[mode]["call_to_start"].append(float(leased) - called[job_id])
                marks.flush()  # the fast path's marks are batched: published_at is read next
                publish_rows = conn.execute(
                    "SELECT extract(epoch FROM min(published_at - created_at)) "
                    "FROM outbox_outboxentry WHERE job_id = ANY(%s::uuid[]) "
                    "AND task_name = 'jobs.execute' GROUP BY job_id",
                    [ids],
                ).fetchall()
                row = conn.execute(
                    "SELECT count(*) FROM jobs_jobevent WHERE job_id = ANY(%s::uuid[]) "
                    "AND reason = 'claimed in a batch'",
                    [ids],
                ).fetchone()
                batched[mode] += int(row[0]) if row else 0
                samples[mode]["start"] += [float(x[0]) for x in start_rows]
                samples[mode]["publish"] += [float(x[0]) for x in publish_rows]
    finally:
        set_fast_path(True)
        for c in conns.values():
            c.close()
        proc.close()
        for p in procs:
            b.fleet.stop(p)
        use_target(main, b.broker())
        shutil.rmtree(os.path.dirname(stamps), ignore_errors=True)
    out: dict[str, Any] = {
        "jobs_per_mode": per_round * b.rounds,
        "relay_interval_s": interval,
        "mark_interval_s": outbox_settings.MARK_INTERVAL,
        "worker_concurrency": 2,
        "raw": {
            "call_to_start_p50_ms": pct(samples["raw"]["call_to_start"], 50) * 1000,
            "call_to_start_p99_ms": pct(samples["raw"]["call_to_start"], 99) * 1000,
        },
    }
    pro = samples["procrastinate"]
    out["procrastinate"] = {
        f"{name}_{q}_ms": pct(pro[key], int(q[1:])) * 1000
        for name, key in (
            ("accept_to_start", "start"),
            ("submit_call", "submit_call"),
            ("return_to_start", "return_to_start"),
            ("call_to_start", "call_to_start"),
        )
        for q in ("p50", "p99")
    }
    for mode in targets:
        data = samples[mode]
        out[mode] = {
            "accept_to_start_p50_ms": pct(data["start"], 50) * 1000,
            "accept_to_start_p99_ms": pct(data["start"], 99) * 1000,
            "commit_to_publish_p50_ms": pct(data["publish"], 50) * 1000,
            "commit_to_publish_p99_ms": pct(data["publish"], 99) * 1000,
            "batched_jobs": batched[mode],
            # accept -> start = the submit call (created_at -> jobs.submit returned: insert,
            # commit, fast-path publish) + the delivery (returned -> the worker's claim)
            "submit_call_p50_ms": pct(data["submit_call"], 50) * 1000,
            "submit_call_p99_ms": pct(data["submit_call"], 99) * 1000,
            "return_to_start_p50_ms": pct(data["return_to_start"], 50) * 1000,
            "return_to_start_p99_ms": pct(data["return_to_start"], 99) * 1000,
            # from the call of jobs.submit, as the raw Celery row is from the call of delay()
            "call_to_start_p50_ms": pct(data["call_to_start"], 50) * 1000,
            "call_to_start_p99_ms": pct(data["call_to_start"], 99) * 1000,
        }
    return out


def _paced[K](
    count: int, rng: random.Random, call: Callable[[], K]
) -> tuple[dict[K, float], dict[K, float]]:
    """`count` calls of `call`, 80-160 ms apart (well below the workers' capacity: latency,
    not queueing): when each was called and when it returned (epoch), by what it returned."""
    called: dict[K, float] = {}
    returned: dict[K, float] = {}
    for _ in range(count):
        at = time.time()
        key = call()
        returned[key] = time.time()
        called[key] = at
        time.sleep(rng.uniform(0.08, 0.16))
    return called, returned


def _raw_call_to_start(path: str, count: int, rng: random.Random) -> list[float]:
    """Paced `raw.stamp.delay()` calls, as the durable rounds pace `jobs.submit`: from each
    call to the moment the task started on the raw worker (which notes it in `path`)."""
    from bench.raw_app import read_stamps, stamp

    def call() -> str:
        token = str(uuid.uuid4())
        stamp.delay(job_id=token, generation=0)
        return token

    called, _ = _paced(count, rng, call)
    wait_until(
        lambda: called.keys() <= read_stamps(path).keys(),
        timeout=120,
        interval=0.1,
        what="raw Celery tasks to start",
    )
    started = read_stamps(path)
    return [started[token] - at for token, at in called.items()]


def _procrastinate_paced(
    proc: ProcrastinateDriver, count: int, rng: random.Random
) -> dict[str, list[float]]:
    """Paced `defer()` calls of Procrastinate's no-op, as the durable rounds pace
    `jobs.submit`, on its worker of 2 (LISTEN/NOTIFY, its default). Accept -> start is its
    own events' times: `deferred` (the defer's transaction) to `started` (the fetch's), as the
    durable side's `created_at` to its `leased` event; the split at the moment `defer()`
    returned, and call -> start from its call."""
    called, returned = _paced(count, rng, lambda: int(proc.task.defer(job_id=str(uuid.uuid4()))))
    ids = list(called)

    def started_all() -> bool:
        row = proc.conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE id = ANY(%s) AND status = 'succeeded'",
            [ids],
        ).fetchone()
        return bool(row) and int(row[0]) == len(ids)

    wait_until(started_all, timeout=120, interval=0.1, what="procrastinate jobs to run")
    rows = proc.conn.execute(
        "SELECT d.job_id, extract(epoch FROM d.at), extract(epoch FROM min(s.at)) "
        "FROM procrastinate_events d JOIN procrastinate_events s "
        "ON s.job_id = d.job_id AND s.type = 'started' "
        "WHERE d.job_id = ANY(%s) AND d.type = 'deferred' GROUP BY d.job_id, d.at",
        [ids],
    ).fetchall()
    out: dict[str, list[float]] = {
        "start": [], "submit_call": [], "return_to_start": [], "call_to_start": []
    }  # fmt: skip
    for job_id, deferred, started in rows:
        out["start"].append(float(started) - float(deferred))
        out["submit_call"].append(returned[job_id] - float(deferred))
        out["return_to_start"].append(float(started) - returned[job_id])
        out["call_to_start"].append(float(started) - called[job_id])
    return out


# --- 3 + 4. end to end vs raw Celery vs Procrastinate -------------------------------------


def scenario_e2e(
    b: Bench, *, with_procrastinate: bool = True, with_reuse: bool = False
) -> dict[str, Any]:
    """Per concurrency: durable, raw Celery and Procrastinate no-ops, rounds interleaved.

    with_reuse adds the proposal of bench/reuse_app.py (worker keeps its DB connection) on
    its own database and Redis DB number, so its counters stay apart.
    """
    main = db_name("main")
    pdb = db_name("procrastinate")
    rdb = db_name("reuse")
    if with_procrastinate:
        ensure_procrastinate_schema(pdb)
    if with_reuse:
        ensure_database(rdb)
        use_target(rdb, b.broker(REUSE_BROKER_DB))
        reuse_owner = bench_owner()
    use_target(main, b.broker())
    owner = bench_owner()

    def durable_round(n: int) -> Round:
        use_target(main, b.broker())
        return broker_round(b, "durable", n, lambda: durable_submit(owner))

    def reuse_round(n: int) -> Round:
        use_target(rdb, b.broker(REUSE_BROKER_DB))
        return broker_round(b, "durable_reuse", n, lambda: durable_submit(reuse_owner))

    out: dict[str, Any] = {
        "jobs_per_round": b.jobs,
        "rounds": b.rounds,
        "submitters": b.submitters,
        "by_concurrency": {},
    }
    for c in b.concurrencies:
        log(f"  e2e: concurrency {c}")
        proc = ProcrastinateDriver(pdb) if with_procrastinate else None
        close_driver_db()
        for db in [main] + ([pdb] if proc else []) + ([rdb] if with_reuse else []):
            vacuum(db)
        base_main = settled_commits(main)
        base_proc = settled_commits(pdb) if proc else 0
        base_reuse = settled_commits(rdb) if with_reuse else 0
        since = _db_now(main)
        workers = [durable_worker(b, f"durable{c}", c, main), raw_worker(b, c)]
        if with_reuse:
            workers.append(
                durable_worker(b, f"reuse{c}", c, rdb, REUSE_BROKER_DB, app="bench.reuse_app")
            )
        if proc:
            workers.append(procrastinate_worker(b, pdb, c))
            proc.open()
        warm = 4 * c
        contenders: dict[str, Callable[[int], Round]] = {
            "durable": durable_round,
            "raw_celery": lambda n: broker_round(b, "raw_celery", n, raw_submit),
        }
        if with_reuse:
            contenders["durable_reuse"] = reuse_round
        if proc:
            contenders["procrastinate"] = lambda n, p=proc: p.round(n, b.submitters)
        done_jobs = dict.fromkeys(contenders, 0)
        rounds: dict[str, list[Round]] = {k: [] for k in contenders}
        metered = {"durable": [main], "durable_reuse": [rdb], "procrastinate": [pdb]}
        not_jobs = {proc.conn.info.backend_pid} if proc else set()  # our count(*) polls
        try:
            for name, run in contenders.items():
                run(warm)
                done_jobs[name] += warm
            for r in range(b.rounds):
                order = list(contenders)
                order = order[r % len(order) :] + order[: r % len(order)]
                for name in order:
                    meter = None
                    if name in metered:
                        meter = PgCpuMeter(metered[name], exclude=not_jobs).start()
                    result = contenders[name](b.jobs)
                    if meter is not None:
                        result.pg_ms = meter.stop()
                    rounds[name].append(result)
                    done_jobs[name] += b.jobs
                    log(f"    {name:14s} {result.throughput:8.1f} jobs/s")
        finally:
            for w in workers:
                b.fleet.stop(w)
            close_driver_db()
            if proc:
                proc.close()
        commits_main = settled_commits(main) - base_main
        entry: dict[str, Any] = {}
        for name, rs in rounds.items():
            entry[name] = {
                "jobs_per_s": median([x.throughput for x in rs]),
                "rounds": [round(x.throughput, 1) for x in rs],
            }
            if name != "procrastinate":
                entry[name]["broker_commands_per_job"] = median(
                    [x.broker_commands / x.jobs for x in rs]
                )
                entry[name]["jobs_per_message"] = median([x.jobs / x.messages for x in rs])
            if name in metered:
                pg = median([x.pg_ms / x.jobs for x in rs])
                entry[name]["postgres_ms_per_job"] = pg
                entry[name]["jobs_per_pg_core_s"] = 1000 / pg if pg else float("nan")
        entry["durable"]["db_commits_per_job"] = commits_main / done_jobs["durable"]
        if with_reuse:
            commits_reuse = settled_commits(rdb) - base_reuse
            entry["durable_reuse"]["db_commits_per_job"] = (
                commits_reuse / done_jobs["durable_reuse"]
            )
            entry["ratio_reuse_vs_raw"] = median(
                [
                    a.throughput / z.throughput
                    for a, z in zip(rounds["durable_reuse"], rounds["raw_celery"], strict=True)
                ]
            )
        entry["ratio_vs_raw"] = median(
            [
                a.throughput / z.throughput
                for a, z in zip(rounds["durable"], rounds["raw_celery"], strict=True)
            ]
        )
        if proc:
            # Our count(*) polls are transactions too: take them out.
            commits_proc = settled_commits(pdb) - base_proc - proc.polls
            entry["procrastinate"]["db_commits_per_job"] = commits_proc / done_jobs["procrastinate"]
            entry["ratio_vs_procrastinate"] = median(
                [
                    a.throughput / z.throughput
                    for a, z in zip(rounds["durable"], rounds["procrastinate"], strict=True)
                ]
            )
        _check_all_succeeded(main, since)
        if with_reuse:
            _check_all_succeeded(rdb, since)
        out["by_concurrency"][str(c)] = entry
    use_target(main, b.broker())
    return out


def _db_now(db: str) -> Any:
    with pg_connect(db) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def _check_all_succeeded(db: str, since: Any) -> None:
    """Every job the block submitted ran to success on this database (none went astray)."""
    with pg_connect(db) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE state <> 'succeeded'), count(*) FROM jobs_job "
            "WHERE created_at >= %s",
            [since],
        ).fetchone()
    if not row or int(row[0]) or not int(row[1]):
        raise RuntimeError(f"{db}: {row} jobs since {since} (not succeeded, total)")


# --- 6. 10k vs 10M rows --------------------------------------------------------------------

FILL_SQL = """
INSERT INTO jobs_job (
    id, kind, kind_version, input_version, request_fingerprint, input, state, attempt,
    max_attempts, generation, lease_owner, result, error_category, error_message,
    created_at, updated_at, started_at, finished_at, next_attempt_at, deadline, owner_id)
SELECT gen_random_uuid(), 'noop', 1, 1, md5(g::text) || md5((g + 7)::text), '{}'::jsonb,
       'succeeded', 1, 3, 1, 'bench-fill', '{}'::jsonb, '', '',
       t, t, t, t + interval '5 ms', t, t + interval '1 day', %(owner)s
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT now() - interval '2 days' - make_interval(secs => g * 0.1) AS t) AS ts
"""


def fill_jobs(db: str, target: int, owner_id: int) -> int:
    """Top the job table up to `target` finished jobs (kept between runs), then ANALYZE."""
    with pg_connect(db) as conn:
        row = conn.execute("SELECT count(*) FROM jobs_job").fetchone()
        have = int(row[0]) if row else 0
        if have < target:
            log(f"  filling {db}: {have} -> {target} rows")
            conn.execute(FILL_SQL, {"owner": owner_id, "n": target - have})
        conn.execute("VACUUM ANALYZE jobs_job")
        row = conn.execute("SELECT count(*) FROM jobs_job").fetchone()
    return int(row[0]) if row else 0


def scenario_scale(b: Bench) -> dict[str, Any]:
    """Durable e2e with 10k vs 10M finished jobs already in the table (issue 28's growth
    target; BENCH_SCALE_ROWS: another size), interleaved. The first run fills the big
    table (about 6 minutes and 4 GB here); later runs keep it."""
    big_rows = int(os.environ.get("BENCH_SCALE_ROWS", "10000000"))
    big = f"{big_rows // 1_000_000}m" if big_rows % 1_000_000 == 0 else str(big_rows)
    sizes = {"10k": 10_000, big: big_rows}
    concurrency = 2
    targets = {}
    for i, (label, rows) in enumerate(sizes.items(), start=1):
        db = db_name(label)
        ensure_database(db)
        use_target(db, b.broker(i))
        owner = bench_owner()
        have = fill_jobs(db, rows, owner.pk)
        targets[label] = (db, i, owner, have)
    close_driver_db()
    for db, _, _, _ in targets.values():
        vacuum(db)
    since = _db_now(db_name("main"))
    workers = [
        durable_worker(b, f"scale{label}", concurrency, db, broker_db)
        for label, (db, broker_db, _, _) in targets.items()
    ]
    rounds: dict[str, list[Round]] = {label: [] for label in targets}
    try:
        for label, (db, broker_db, owner, _) in targets.items():
            use_target(db, b.broker(broker_db))
            broker_round(b, label, 4 * concurrency, lambda owner=owner: durable_submit(owner))
        for r in range(b.rounds):
            order = list(targets) if r % 2 == 0 else list(reversed(targets))
            for label in order:
                db, broker_db, owner, _ = targets[label]
                use_target(db, b.broker(broker_db))
                result = broker_round(b, label, b.jobs, lambda owner=owner: durable_submit(owner))
                rounds[label].append(result)
                log(f"    {label:4s} rows: {result.throughput:8.1f} jobs/s")
    finally:
        for w in workers:
            b.fleet.stop(w)
        use_target(db_name("main"), b.broker())
    for db, _, _, _ in targets.values():
        _check_all_succeeded(db, since)
    return {
        "concurrency": concurrency,
        "submitters": b.submitters,
        "jobs_per_round": b.jobs,
        "rows": {label: t[3] for label, t in targets.items()},
        "big": big,
        "10k_jobs_per_s": median([x.throughput for x in rounds["10k"]]),
        f"{big}_jobs_per_s": median([x.throughput for x in rounds[big]]),
        f"ratio_{big}_vs_10k": median(
            [m.throughput / k.throughput for m, k in zip(rounds[big], rounds["10k"], strict=True)]
        ),
        "rounds": {label: [round(x.throughput, 1) for x in rs] for label, rs in rounds.items()},
    }


# --- 7. serialization keys over many keys vs no keys (issue 7) -----------------------------

SERIAL_KEYS = 256


def serial_submit(owner: Any, n: list[int]) -> None:
    import jobs

    n[0] += 1
    jobs.submit(kind="noop", input={}, owner=owner, serialization_key=f"doc:{n[0] % SERIAL_KEYS}")


def scenario_serial(b: Bench) -> dict[str, Any]:
    """The same no-op load with a serialization key over many keys and without, interleaved."""
    main = db_name("main")
    use_target(main, b.broker())
    owner = bench_owner()
    counter = [0]
    c = max(b.concurrencies)
    worker = durable_worker(b, f"serial{c}", c, main)
    contenders: dict[str, Callable[[int], Round]] = {
        "no_keys": lambda n: broker_round(b, "no_keys", n, lambda: durable_submit(owner)),
        "many_keys": lambda n: broker_round(
            b, "many_keys", n, lambda: serial_submit(owner, counter)
        ),
    }
    rounds: dict[str, list[Round]] = {k: [] for k in contenders}
    # A round lasts about 0.2 s, so one disturbed pair moves a median of three ratios by
    # 0.2-0.3 (0.79x and 1.13x in two runs of the same code): take more pairs.
    pairs = max(b.rounds, SERIAL_MIN_ROUNDS)
    try:
        for run in contenders.values():
            run(4 * c)
        for r in range(pairs):
            order = list(contenders)
            order = order[r % 2 :] + order[: r % 2]
            for name in order:
                vacuum(main)  # both loads share the database: each round starts clean
                result = contenders[name](b.jobs)
                rounds[name].append(result)
                log(f"    {name:10s} {result.throughput:8.1f} jobs/s")
    finally:
        b.fleet.stop(worker)
        close_driver_db()
    return {
        "keys": SERIAL_KEYS,
        "worker_concurrency": c,
        "jobs_per_round": b.jobs,
        "rounds": pairs,
        "no_keys_jobs_per_s": median([x.throughput for x in rounds["no_keys"]]),
        "many_keys_jobs_per_s": median([x.throughput for x in rounds["many_keys"]]),
        "ratio_keys_vs_none": median(
            [
                a.throughput / z.throughput
                for a, z in zip(rounds["many_keys"], rounds["no_keys"], strict=True)
            ]
        ),
        # > 1: the fast path packed concurrent submits into batch messages (outbox/fastpath.py)
        "jobs_per_message": {
            name: median([x.jobs / x.messages for x in rs]) for name, rs in rounds.items()
        },
    }
