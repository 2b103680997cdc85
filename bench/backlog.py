"""Backlog drain (the batch path) and submit_many vs single submits.

`backlog`: N jobs queued with the workers down, then the workers started and the queue
drained, durable-jobs against raw Celery in alternating rounds, at each concurrency >= 2.
  - durable: `jobs.submit_many` in chunks of CHUNK requests; each chunk's commit publishes
    its rows from memory (the fast path), packed into `jobs.execute_many` messages of
    OUTBOX_BATCH_MAX rows (outbox/batching.py). Drain time = first claim (min `leased`
    JobEvent.at) -> last completion (max Job.finished_at), read from the database.
  - raw Celery: N `raw.noop` messages (one per task, `task.delay()`), the worker of
    bench/raw_app.py; drain time = first task start -> last task end, written by the pool
    processes themselves (bench/raw_app.py, BENCH_RAW_TIMES_DIR).
  Both: prefork, the same processes and concurrency, prefetch 1, acks_late; the clock starts
  when the first job starts (worker start-up excluded) and stops when the last job's work
  ends (before its ack). Each round also measures CPU per job by process, submit included:
  the driver (the submits), the worker (from ready to drained), PostgreSQL (the bench
  database's backends, bench/pgcpu.py) and Redis; and the database's commits per job
  (pg_stat_database.xact_commit delta of the round, read once every backend exited).
`submitmany`: the submit alone, no workers: N jobs by one `jobs.submit_many` call, by calls
  of CHUNK, and by N `jobs.submit` calls, one thread, rounds interleaved.
Both use their own database (dj_bench_backlog), emptied before every round, and their own
Redis database number for the durable queue.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.cpu_split import driver_cpu, proc_cpu, tree_cpu
from bench.infra import db_name, ensure_database, median, pg_connect, poll, settled_commits
from bench.pgcpu import PgCpuMeter
from bench.scenarios import (
    FILL_SQL,
    Bench,
    bench_owner,
    close_driver_db,
    durable_worker,
    log,
    use_target,
)

CHUNK = 1000  # requests per submit_many call in the drain: 50 messages of 20 each
BROKER_DB = 4  # the durable queue of these scenarios: its own Redis database number
DRAIN_TIMEOUT = 900.0
TRUNCATE_SQL = "TRUNCATE jobs_job, jobs_jobevent, outbox_outboxentry CASCADE"
HISTORY = 1_000  # finished jobs in the table at the start of every round


@dataclass
class Drain:
    """One round of one contender: N jobs submitted with no worker, then drained."""

    contender: str
    jobs: int
    drain_s: float
    submit_s: float
    messages: int
    cpu_ms: dict[str, float] = field(default_factory=dict)  # per job, by process
    commits: int = 0
    batched: int = 0  # jobs claimed by jobs_claim_many (durable)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.drain_s


def empty_database(db: str, owner_id: int) -> None:
    """Every round starts from the same tables: HISTORY finished jobs, nothing waiting, and
    statistics taken then (VACUUM ANALYZE), as a quiet system's would be before a burst.

    ANALYZE of an empty table keeps the old column statistics, so an empty start would
    carry over whatever the last ANALYZE saw; finished rows make the start reproducible."""
    with pg_connect(db) as conn:
        conn.execute(TRUNCATE_SQL)
        conn.execute(FILL_SQL, {"owner": owner_id, "n": HISTORY})
        conn.execute("VACUUM (ANALYZE) jobs_job, jobs_jobevent, outbox_outboxentry")


def requests_of(owner: Any, n: int) -> list[dict[str, Any]]:
    return [{"kind": "noop", "input": {}, "owner": owner} for _ in range(n)]


def submit_chunks(owner: Any, n: int, chunk: int) -> None:
    import jobs

    for start in range(0, n, chunk):
        jobs.submit_many(requests_of(owner, min(chunk, n - start)))


def queued(client: redis.Redis, queue: str) -> int:
    """Messages waiting in a kombu Redis queue (its priority lists included: the outbox
    publishes each priority band to its own)."""
    keys = [queue] + [f"{queue}\x06\x16{p}" for p in (3, 6, 9)]
    return sum(int(client.llen(k)) for k in keys)


class Window:
    """CPU seconds of the driver, the worker (from ready) and Redis over one round."""

    def __init__(self, b: Bench) -> None:
        assert b.redis.proc is not None
        self.redis_pid = b.redis.proc.pid
        self.driver0 = driver_cpu()
        self.redis0 = proc_cpu(self.redis_pid)
        self.worker0 = self.main0 = 0.0

    def worker_ready(self, pid: int) -> None:
        self.worker0, self.main0 = tree_cpu(pid), proc_cpu(pid)

    def per_job(self, n: int, pid: int, postgres_ms: float, meter_s: float) -> dict[str, float]:
        driver = driver_cpu() - self.driver0 - meter_s
        out = {
            "driver": driver * 1000 / n,
            "worker": (tree_cpu(pid) - self.worker0) * 1000 / n,
            "worker_main": (proc_cpu(pid) - self.main0) * 1000 / n,
            "postgres": postgres_ms / n,
            "redis": (proc_cpu(self.redis_pid) - self.redis0) * 1000 / n,
        }
        out["total"] = sum(v for k, v in out.items() if k != "worker_main")
        return out


def durable_drain(
    b: Bench,
    db: str,
    owner: Any,
    n: int,
    c: int,
    *,
    analyze: bool,
    submit: Callable[[Any, int], None] | None = None,
    name: str | None = None,
) -> Drain:
    """One durable round. The tables were ANALYZEd empty (the statistics of a quiet system
    before a burst); with `analyze`, they are ANALYZEd again once the backlog is in, before
    the workers start (what autovacuum does within a minute or so of a burst). `submit(owner,
    n)` writes the backlog (default: `submit_chunks` of plain noop jobs); `name` names the
    contender."""
    from outbox import marks

    client = redis.Redis(host="127.0.0.1", port=b.redis.port, db=BROKER_DB)
    client.flushdb()
    empty_database(db, owner.pk)
    close_driver_db()
    commits0 = settled_commits(db)
    use_target(db, b.broker(BROKER_DB))
    meter = PgCpuMeter([db]).start()
    window = Window(b)
    started = time.perf_counter()
    (submit or (lambda who, k: submit_chunks(who, k, CHUNK)))(owner, n)
    submit_s = time.perf_counter() - started
    marks.stop()  # mark what is queued now and close the thread's connection: no idle wait
    messages = queued(client, "jobs")
    not_jobs = 0  # our own transactions in the round's commit count
    if analyze:
        with pg_connect(db) as conn:
            meter.exclude.add(conn.info.backend_pid)
            conn.execute("ANALYZE jobs_job, jobs_jobevent, outbox_outboxentry")
        not_jobs += 1
    if not messages:
        with pg_connect(db) as conn:
            rows = conn.execute(
                "SELECT published_at IS NOT NULL, last_error, count(*) FROM outbox_outboxentry "
                "GROUP BY 1, 2"
            ).fetchall()
        keys = {k: client.type(k) for k in client.scan_iter()}
        raise RuntimeError(f"durable drain: no message queued; outbox rows {rows}; keys {keys}")
    acks0 = b.counters.acks()
    worker = durable_worker(b, f"backlog{c}", c, db, BROKER_DB)
    pid = worker.popen.pid
    try:
        window.worker_ready(pid)
        poll(
            lambda: b.counters.acks() - acks0 >= messages,
            timeout=DRAIN_TIMEOUT,
            interval=0.05,
            what=f"{messages} durable messages acked",
        )
        cpu = window.per_job(n, pid, meter.stop(), meter.own_cpu_s)
    finally:
        b.fleet.stop(worker)
    close_driver_db()
    commits = settled_commits(db) - commits0 - not_jobs
    with pg_connect(db) as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM (SELECT max(finished_at) FROM jobs_job)"
            " - (SELECT min(at) FROM jobs_jobevent WHERE to_state = 'leased')),"
            " (SELECT count(*) FROM jobs_job WHERE state = 'succeeded'"
            "  AND lease_owner IS DISTINCT FROM 'bench-fill'),"
            " (SELECT count(*) FROM jobs_jobevent WHERE reason = 'claimed in a batch')"
        ).fetchone()
    if row is None or row[0] is None or int(row[1]) != n:
        raise RuntimeError(f"durable drain: (seconds, succeeded, batched) = {row} for {n} jobs")
    drain_s, batched = float(row[0]), int(row[2])
    name = name or ("durable_analyzed" if analyze else "durable")
    return Drain(name, n, drain_s, submit_s, messages, cpu, commits, batched)


def raw_worker_timed(b: Bench, c: int, times_dir: str) -> Any:
    env = b.fleet.env(BENCH_BROKER_URL=b.broker(), BENCH_RAW_TIMES_DIR=times_dir)
    return b.fleet.celery_worker(
        f"rawbacklog{c}", app="bench.raw_app", queue="raw", concurrency=c, env=env
    )


def raw_drain(b: Bench, n: int, c: int) -> Drain:
    from bench.raw_app import RAW_QUEUE, noop, read_times

    # Celery takes CELERY_BROKER_URL from the environment over an app's own broker: back to
    # Redis database 0, for this process's raw app and the worker's environment.
    use_target(db_name("main"), b.broker())
    client = redis.Redis(host="127.0.0.1", port=b.redis.port, db=0)
    if queued(client, RAW_QUEUE):
        raise RuntimeError("raw drain: the raw queue is not empty before the round")
    times_dir = tempfile.mkdtemp(prefix="rawtimes-", dir=b.fleet.workdir)
    window = Window(b)
    started = time.perf_counter()
    for _ in range(n):
        noop.delay(job_id=str(uuid.uuid4()), generation=0)
    submit_s = time.perf_counter() - started
    messages = queued(client, RAW_QUEUE)
    acks0 = b.counters.acks()
    worker = raw_worker_timed(b, c, times_dir)
    pid = worker.popen.pid
    try:
        window.worker_ready(pid)
        poll(
            lambda: b.counters.acks() - acks0 >= messages,
            timeout=DRAIN_TIMEOUT,
            interval=0.05,
            what=f"{messages} raw messages acked",
        )
        cpu = window.per_job(n, pid, 0.0, 0.0)
    finally:
        b.fleet.stop(worker)
    first, last, _ = read_times(times_dir)
    if messages != n:
        raise RuntimeError(f"raw drain: {messages} messages queued for {n} tasks")
    return Drain("raw_celery", n, last - first, submit_s, messages, cpu)


def _summary(rounds: list[Drain]) -> dict[str, Any]:
    keys = rounds[0].cpu_ms.keys()
    out: dict[str, Any] = {
        "jobs_per_s": median([r.jobs_per_s for r in rounds]),
        "rounds": [round(r.jobs_per_s, 1) for r in rounds],
        "submit_jobs_per_s": median([r.jobs / r.submit_s for r in rounds]),
        "jobs_per_message": median([r.jobs / r.messages for r in rounds]),
        "cpu_ms_per_job": {k: median([r.cpu_ms[k] for r in rounds]) for k in keys},
    }
    if rounds[0].contender.startswith("durable"):
        pg = out["cpu_ms_per_job"]["postgres"]
        out["db_commits_per_job"] = median([r.commits / r.jobs for r in rounds])
        out["jobs_per_pg_core_s"] = 1000 / pg if pg else float("nan")
        out["batched_share"] = median([r.batched / r.jobs for r in rounds])
    return out


def scenario_backlog(b: Bench) -> dict[str, Any]:
    """Per concurrency (>= 2): durable and raw drains of b.backlog jobs, rounds alternated."""
    from outbox.conf import outbox_settings

    db = db_name("backlog")
    ensure_database(db)
    use_target(db, b.broker(BROKER_DB))
    owner = bench_owner()
    n = b.backlog
    out: dict[str, Any] = {
        "jobs": n,
        "chunk": CHUNK,
        "batch_max": outbox_settings.BATCH_MAX,
        "rounds": b.rounds,
        "by_concurrency": {},
    }
    for c in [c for c in b.concurrencies if c >= 2] or [2]:
        log(f"  backlog: concurrency {c}, {n} jobs")
        contenders: dict[str, Callable[[], Drain]] = {
            "durable": lambda c=c: durable_drain(b, db, owner, n, c, analyze=False),
            "raw_celery": lambda c=c: raw_drain(b, n, c),
            "durable_analyzed": lambda c=c: durable_drain(b, db, owner, n, c, analyze=True),
        }
        rounds: dict[str, list[Drain]] = {k: [] for k in contenders}
        for r in range(b.rounds):
            order = list(contenders)
            order = order[r % len(order) :] + order[: r % len(order)]
            for name in order:
                result = contenders[name]()
                rounds[name].append(result)
                cpu = result.cpu_ms
                log(
                    f"    {name:10s} drain {result.jobs_per_s:8.1f} jobs/s  submit "
                    f"{result.jobs / result.submit_s:8.1f}/s  CPU ms/job: "
                    + "  ".join(f"{k} {v:.3f}" for k, v in cpu.items())
                    + (f"  commits/job {result.commits / n:.3f}" if result.commits else "")
                )
        entry: dict[str, Any] = {name: _summary(rs) for name, rs in rounds.items()}
        for name, key in (
            ("durable", "ratio_vs_raw"),
            ("durable_analyzed", "ratio_analyzed_vs_raw"),
        ):
            entry[key] = median(
                [
                    d.jobs_per_s / z.jobs_per_s
                    for d, z in zip(rounds[name], rounds["raw_celery"], strict=True)
                ]
            )
        out["by_concurrency"][str(c)] = entry
    use_target(db_name("main"), b.broker())
    return out


def scenario_submitmany(b: Bench) -> dict[str, Any]:
    """N jobs by one submit_many call, by calls of CHUNK, and by N submits; no workers."""
    import jobs

    db = db_name("backlog")
    ensure_database(db)
    use_target(db, b.broker(BROKER_DB))
    owner = bench_owner()
    client = redis.Redis(host="127.0.0.1", port=b.redis.port, db=BROKER_DB)
    n = b.backlog

    def single(k: int) -> None:
        for _ in range(k):
            jobs.submit(kind="noop", input={}, owner=owner)

    contenders: dict[str, Callable[[int], Any]] = {
        "submit_many": lambda k: jobs.submit_many(requests_of(owner, k)),
        "submit_many_chunks": lambda k: submit_chunks(owner, k, CHUNK),
        "single": single,
    }
    for run in contenders.values():
        run(50)  # warm: connection, prepared statements, the marks thread
    rates: dict[str, list[float]] = {k: [] for k in contenders}
    pg_ms: dict[str, list[float]] = {k: [] for k in contenders}
    for r in range(b.rounds):
        order = list(contenders)
        order = order[r % len(order) :] + order[: r % len(order)]
        for name in order:
            client.flushdb()
            empty_database(db, owner.pk)
            meter = PgCpuMeter([db]).start()
            started = time.perf_counter()
            contenders[name](n)
            elapsed = time.perf_counter() - started
            pg_ms[name].append(meter.stop() / n)
            rates[name].append(n / elapsed)
            pg = pg_ms[name][-1]
            log(f"    {name:18s} {n / elapsed:9.1f} jobs/s  PostgreSQL {pg:.3f} ms/job")
    client.flushdb()
    close_driver_db()
    use_target(db_name("main"), b.broker())
    out: dict[str, Any] = {"jobs": n, "chunk": CHUNK, "rounds": b.rounds}
    for name in contenders:
        out[name] = {
            "jobs_per_s": median(rates[name]),
            "rounds": [round(x, 1) for x in rates[name]],
            "postgres_ms_per_job": median(pg_ms[name]),
        }
    for name in ("submit_many", "submit_many_chunks"):
        out[f"ratio_{name}_vs_single"] = median(
            [m / s for m, s in zip(rates[name], rates["single"], strict=True)]
        )
    return out
