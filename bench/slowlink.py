"""Slow links: the backlog drain with every connection 1 ms away each way (issue 25, item 6).

The drain of bench/backlog.py (N jobs queued with the workers down, then drained; durable
against raw Celery, the same prefork worker, concurrency, prefetch 1 and acks_late), run at
each of CONCURRENCIES, and at the slow-link setting (TUNED: more processes, more jobs a
message), over three links (the direct one at the first concurrency only), all contenders and
links interleaved in one run, order rotated each round:

  - `direct`: no proxy (the backlog scenario's setting, for context);
  - `proxy0`: every connection through a FaultProxy (tests/network/proxy.py) with no delay;
  - `proxy1`: the same proxies with `delay(1)`: 1 ms each way, a 2 ms round trip.

Each link has four proxies, as if the driver and the worker were two hosts: the driver's (the
submits, the fast path's publishes) and the worker's, each to PostgreSQL and to Redis. Every
process of a contender connects through them (DATABASE_URL, CELERY_BROKER_URL and
BENCH_BROKER_URL point at the proxies); only the bench's own measuring connections (queue
lengths, ack counts, commit counters) go direct. proxy1 / proxy0 is what the latency costs,
proxy0 / direct what the proxy itself costs on this machine (it runs in the driver process).

Round trips are counted by the worker's proxies, from the worker's spawn to its stop (start-up
included): a client that waits for each answer sends one chunk per round trip, so
chunks sent upstream per job are its round trips per job. The worker's PostgreSQL chunks are
labelled by the statement they carry (the first Parse, Bind or Query message: a Bind names a
statement prepared earlier on that connection) and its Redis chunks by their commands, so the
summary says where the round trips go.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis

from bench.backlog import Drain, durable_drain, raw_drain
from bench.infra import (
    PG_HOST,
    PG_PORT,
    PG_USER,
    Fleet,
    Proc,
    db_name,
    ensure_database,
    median,
    pg_connect,
)
from bench.scenarios import Bench, bench_owner, close_driver_db, log, set_setting, use_target
from tests.network.proxy import FaultProxy

DELAY_MS = 1.0
# Jobs per drain. Durable drains the backlog scenario's backlog (10,000; --quick 1,000): a
# rate of a few thousand a second over 3,000 jobs is a third start-up (every pool process's
# first connections, the main process handing out the first messages one by one over the
# link; `ramp_ms` below), so it measured the worker's start more than its drain. Raw Celery,
# one message a task and no start-up worth the name against ~140 tasks/s at 1 ms, keeps
# 3,000 (its rounds under latency take the longest: ~22 s each).
RAW_JOBS = 3_000
# Concurrency 2 is the backlog scenario's; 4 is what a worker host across a slow link runs
# (processes waiting on round trips, not on the CPU). Each has its own targets; the direct
# link (context only) is run at the first.
CONCURRENCIES = (2, 4)
# The setting docs/operations.md ("Slow links") gives a worker host across a slow link: more
# processes, and more jobs a message. Past c=4 the drain at 1 ms stops growing at ~100
# messages/s whatever the concurrency (Celery's main process delivers one message at a time:
# its BRPOP and kombu's unacked write, serial round trips), so only more jobs a message
# raise it. Run beside the defaults, with targets of its own, both links alike.
TUNED_CONCURRENCY, TUNED_BATCH_MAX = 8, 100
TUNED = f"{TUNED_CONCURRENCY} (OUTBOX_BATCH_MAX={TUNED_BATCH_MAX})"
LINKS = ("direct", "proxy0", "proxy1")
CONTENDERS = ("durable", "raw_celery")
LABEL_CHARS = 72
TOP = 12


def _pg_label(data: bytes, prepared: dict[bytes, bytes]) -> str:
    """The statement a client -> PostgreSQL chunk carries (its first Parse, Bind or Query)."""
    label = b""
    i = 0
    while i + 5 <= len(data):
        kind, length = data[i : i + 1], int.from_bytes(data[i + 1 : i + 5], "big")
        if not kind.isalpha() or length < 4:
            return "(start-up, authentication)"
        body = data[i + 5 : i + 1 + length]
        if kind == b"P":
            name, _, rest = body.partition(b"\0")
            prepared[name] = rest.split(b"\0", 1)[0]
            label = label or prepared[name]
        elif kind == b"B":
            statement = body.partition(b"\0")[2].split(b"\0", 1)[0]
            label = label or prepared.get(statement, b"(a statement prepared unseen)")
        elif kind == b"Q":
            label = label or body.split(b"\0", 1)[0]
        elif kind == b"X":
            label = label or b"(terminate)"
        i += 1 + length
    text = " ".join(label.decode(errors="replace").split()) or "(other)"
    return text[:LABEL_CHARS]


def _redis_label(data: bytes, prepared: dict[bytes, bytes]) -> str:
    """The commands of a client -> Redis chunk, `+`-joined (a pipeline sends several)."""
    names: list[str] = []
    i = 0
    try:
        while data[i : i + 1] == b"*":
            end = data.index(b"\r\n", i)
            argc, i = int(data[i + 1 : end]), end + 2
            args = []
            for _ in range(argc):
                end = data.index(b"\r\n", i)
                size, i = int(data[i + 1 : end]), end + 2
                args.append(data[i : i + size])
                i += size + 2
            names.append(args[0].decode(errors="replace").upper() if args else "?")
    except ValueError:  # a command split across chunks: the names seen so far
        pass
    if len(names) > 4:
        return "+".join(names[:3]) + f"+... ({len(names)} commands)"
    return "+".join(names) or "(other)"


@dataclass
class Tap:
    """One proxy and what it saw: chunks each way and the upstream chunks by label."""

    proxy: FaultProxy
    label: Callable[[bytes, dict[bytes, bytes]], str] | None = None
    labels: Counter[str] = field(default_factory=Counter)
    prepared: dict[int, dict[bytes, bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.label is not None:
            self.proxy.observe = self._observe

    def _observe(self, direction: str, number: int, data: bytes) -> None:
        if direction == "up" and self.label is not None:
            self.labels[self.label(data, self.prepared.setdefault(number, {}))] += 1

    def snapshot(self) -> tuple[dict[str, int], Counter[str]]:
        return {**self.proxy.chunks, "connections": self.proxy.accepted}, Counter(self.labels)


def _thread_cpu(tid: int) -> float:
    try:
        raw = Path(f"/proc/self/task/{tid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Link:
    """Four proxies at one delay: the driver's and the worker's, to PostgreSQL and Redis."""

    def __init__(self, name: str, redis_port: int, delay_ms: float) -> None:
        self.name, self.delay_ms = name, delay_ms
        before = {t.ident for t in threading.enumerate()}
        pg, rd = (PG_HOST, PG_PORT), ("127.0.0.1", redis_port)
        self.driver_pg = FaultProxy(pg).start()
        self.driver_redis = FaultProxy(rd).start()
        self.worker_pg = Tap(FaultProxy(pg).start(), _pg_label)
        self.worker_redis = Tap(FaultProxy(rd).start(), _redis_label)
        self.tids = [
            t.native_id
            for t in threading.enumerate()
            if t.ident not in before and t.native_id is not None
        ]
        for proxy in self.proxies():
            proxy.delay(delay_ms)

    def proxies(self) -> list[FaultProxy]:
        return [self.driver_pg, self.driver_redis, self.worker_pg.proxy, self.worker_redis.proxy]

    def cpu_s(self) -> float:
        """CPU seconds of the four proxies' threads (they run in this process)."""
        return sum(_thread_cpu(tid) for tid in self.tids)

    def worker_env(self, env: dict[str, str]) -> dict[str, str]:
        """A worker's environment with its database and broker URLs through this link."""
        out = dict(env)
        for key, port in (
            ("DATABASE_URL", self.worker_pg.proxy.port),
            ("CELERY_BROKER_URL", self.worker_redis.proxy.port),
            ("BENCH_BROKER_URL", self.worker_redis.proxy.port),
        ):
            if key in out:
                parts = urlsplit(out[key])
                netloc = f"{parts.netloc.rpartition('@')[0]}@" if "@" in parts.netloc else ""
                out[key] = urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{port}"))
        return out

    def close(self) -> None:
        for proxy in self.proxies():
            proxy.close()


@dataclass
class LinkFleet(Fleet):
    """The bench's fleet (same workdir and process list) with its workers behind a link; the
    worker proxies' counters are taken when a worker is spawned and when it is stopped."""

    link: Link | None = None
    at_spawn: tuple[Any, Any] | None = None
    at_stop: tuple[Any, Any] | None = None
    cpu_at_spawn: float = 0.0
    cpu_at_stop: float = 0.0

    def _snapshot(self) -> tuple[Any, Any]:
        assert self.link is not None
        return self.link.worker_pg.snapshot(), self.link.worker_redis.snapshot()

    def celery_worker(
        self, name: str, *, app: str, queue: str, concurrency: int, env: dict[str, str]
    ) -> Proc:
        assert self.link is not None
        self.at_spawn, self.cpu_at_spawn = self._snapshot(), self.link.cpu_s()
        return super().celery_worker(
            name, app=app, queue=queue, concurrency=concurrency, env=self.link.worker_env(env)
        )

    def stop(self, proc: Proc) -> None:
        if self.link is not None:
            self.at_stop, self.cpu_at_stop = self._snapshot(), self.link.cpu_s()
        super().stop(proc)


@dataclass
class LinkBench(Bench):
    """A Bench whose driver publishes through the link's driver Redis proxy."""

    driver_redis_port: int = 0

    def broker(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.driver_redis_port}/{db}"


def point_driver(pg: tuple[str, int]) -> None:
    """This process's Django connections (every thread's: they share the settings dict) to
    `pg`; both Celery apps forget their broker pools, so the next publish connects anew."""
    from django.db import connections

    from bench.raw_app import app as raw_app
    from jobsite.celery import app

    close_driver_db()
    settings = connections["default"].settings_dict
    settings["HOST"], settings["PORT"] = pg[0], str(pg[1])
    for celery_app in (app, raw_app):
        celery_app._pool = None
        celery_app.amqp._producer_pool = None


def round_trip_ms(link: Link | None, redis_port: int, db: str) -> dict[str, float]:
    """Median of 50 `SELECT 1` and 50 `PING` through the link's worker proxies (or direct)."""
    pg = (PG_HOST, PG_PORT) if link is None else ("127.0.0.1", link.worker_pg.proxy.port)
    rd = redis_port if link is None else link.worker_redis.proxy.port

    def timed(call: Callable[[], Any]) -> float:
        call()
        samples = []
        for _ in range(50):
            t0 = time.perf_counter()
            call()
            samples.append((time.perf_counter() - t0) * 1000)
        return statistics.median(samples)

    with psycopg.connect(host=pg[0], port=pg[1], user=PG_USER, dbname=db) as conn:
        pg_ms = timed(lambda: conn.execute("SELECT 1").fetchone())
    client = redis.Redis(host="127.0.0.1", port=rd)
    try:
        redis_ms = timed(client.ping)
    finally:
        client.close()
    return {"postgres_ms": pg_ms, "redis_ms": redis_ms}


@dataclass
class LinkRound:
    """One drain over one link, with what the worker's proxies counted."""

    link: str
    drain: Drain
    pg_up: int = 0
    redis_up: int = 0
    pg_connections: int = 0
    redis_connections: int = 0
    driver_pg_up: int = 0
    driver_redis_up: int = 0
    proxy_cpu_s: float = 0.0
    pg_labels: Counter[str] = field(default_factory=Counter)
    redis_labels: Counter[str] = field(default_factory=Counter)
    cycle_ms: tuple[float, float] | None = None  # durable: median (busy, gap) per message
    ramp_ms: float | None = None  # durable: first claim -> every pool process has claimed


# Per pool process (the lease owner's pid), each message's jobs share one claim (started_at)
# and one group commit (finished_at): `busy` is claim -> completion inside the process, `gap`
# the previous completion -> this claim (its commit, the ack, the next delivery, the claim).
CYCLE_SQL = """
WITH m AS (
    SELECT split_part(lease_owner, ':', 3) AS pid, started_at, max(finished_at) AS finished_at
    FROM jobs_job WHERE lease_owner IS DISTINCT FROM 'bench-fill' GROUP BY 1, 2
), c AS (
    SELECT extract(epoch FROM finished_at - started_at) * 1000 AS busy,
           extract(epoch FROM started_at - lag(finished_at) OVER w) * 1000 AS gap
    FROM m WINDOW w AS (PARTITION BY pid ORDER BY started_at)
)
SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY busy),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY gap) FROM c
"""


# The worker's start inside the drain window: from the first claim to the last pool
# process's first claim (each process's first message waits for its connections and for the
# main process to hand out the messages before it, one delivery at a time).
RAMP_SQL = """
SELECT extract(epoch FROM max(first) - min(first)) * 1000 FROM (
    SELECT min(started_at) AS first FROM jobs_job
    WHERE lease_owner IS DISTINCT FROM 'bench-fill' GROUP BY split_part(lease_owner, ':', 3)
) f
"""


def message_cycle_ms(db: str) -> tuple[tuple[float, float], float]:
    """Median (busy, gap) ms of a durable drain's messages, per pool process (CYCLE_SQL),
    and the drain's ramp (RAMP_SQL)."""
    with pg_connect(db) as conn:
        row = conn.execute(CYCLE_SQL).fetchone()
        ramp = conn.execute(RAMP_SQL).fetchone()
    assert row is not None and ramp is not None
    return (float(row[0]), float(row[1])), float(ramp[0])


def _one(
    b: Bench, link: Link | None, contender: str, db: str, owner: Any, n: int, c: int
) -> LinkRound:
    if link is None:
        point_driver((PG_HOST, PG_PORT))
        if contender == "durable":
            drain = durable_drain(b, db, owner, n, c, analyze=False)
            cycle, ramp = message_cycle_ms(db)
            return LinkRound("direct", drain, cycle_ms=cycle, ramp_ms=ramp)
        return LinkRound("direct", raw_drain(b, n, c))
    fleet = LinkFleet(workdir=b.fleet.workdir, procs=b.fleet.procs, link=link)
    lb = LinkBench(**{**vars(b), "fleet": fleet, "driver_redis_port": link.driver_redis.port})
    point_driver(("127.0.0.1", link.driver_pg.port))
    driver0 = link.driver_pg.chunks["up"], link.driver_redis.chunks["up"]
    if contender == "durable":
        drain = durable_drain(lb, db, owner, n, c, analyze=False)
    else:
        drain = raw_drain(lb, n, c)
    assert fleet.at_spawn is not None and fleet.at_stop is not None
    (pg0, pgl0), (rd0, rdl0) = fleet.at_spawn
    (pg1, pgl1), (rd1, rdl1) = fleet.at_stop
    cycle: tuple[float, float] | None = None
    ramp: float | None = None
    if contender == "durable":
        cycle, ramp = message_cycle_ms(db)
    return LinkRound(
        link.name,
        drain,
        pg_up=pg1["up"] - pg0["up"],
        redis_up=rd1["up"] - rd0["up"],
        pg_connections=pg1["connections"] - pg0["connections"],
        redis_connections=rd1["connections"] - rd0["connections"],
        driver_pg_up=link.driver_pg.chunks["up"] - driver0[0],
        driver_redis_up=link.driver_redis.chunks["up"] - driver0[1],
        proxy_cpu_s=fleet.cpu_at_stop - fleet.cpu_at_spawn,
        pg_labels=pgl1 - pgl0,
        redis_labels=rdl1 - rdl0,
        cycle_ms=cycle,
        ramp_ms=ramp,
    )


def _summary(rounds: list[LinkRound]) -> dict[str, Any]:
    n = rounds[0].drain.jobs
    out: dict[str, Any] = {
        "jobs_per_s": median([r.drain.jobs_per_s for r in rounds]),
        "rounds": [round(r.drain.jobs_per_s, 1) for r in rounds],
        "submit_jobs_per_s": median([r.drain.jobs / r.drain.submit_s for r in rounds]),
        "jobs_per_message": median([r.drain.jobs / r.drain.messages for r in rounds]),
        "worker_cpu_ms_per_job": median([r.drain.cpu_ms["worker"] for r in rounds]),
    }
    if rounds[0].drain.commits:
        out["db_commits_per_job"] = median([r.drain.commits / n for r in rounds])
    if rounds[0].cycle_ms is not None:
        out["message_busy_ms"] = median([r.cycle_ms[0] for r in rounds if r.cycle_ms])
        out["message_gap_ms"] = median([r.cycle_ms[1] for r in rounds if r.cycle_ms])
        out["ramp_ms"] = median([r.ramp_ms for r in rounds if r.ramp_ms is not None])
    if rounds[0].link != "direct":
        out["pg_round_trips_per_job"] = median([r.pg_up / n for r in rounds])
        out["redis_round_trips_per_job"] = median([r.redis_up / n for r in rounds])
        out["submit_pg_round_trips_per_job"] = median([r.driver_pg_up / n for r in rounds])
        out["submit_redis_round_trips_per_job"] = median([r.driver_redis_up / n for r in rounds])
        out["worker_pg_connections"] = median([r.pg_connections for r in rounds])
        out["worker_redis_connections"] = median([r.redis_connections for r in rounds])
        out["proxy_cpu_ms_per_job"] = median([r.proxy_cpu_s * 1000 / n for r in rounds])
        for key in ("pg_labels", "redis_labels"):
            total: Counter[str] = Counter()
            for r in rounds:
                total.update(getattr(r, key))
            out[f"{key[:-7]}_by_label"] = [
                [label, count / n / len(rounds)] for label, count in total.most_common(TOP)
            ]
    return out


def _ratios(rounds: dict[str, list[LinkRound]], a: str, b: str) -> float:
    return median(
        [x.drain.jobs_per_s / y.drain.jobs_per_s for x, y in zip(rounds[a], rounds[b], strict=True)]
    )


def _order(r: int, links: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    pairs = [(contender, link) for link in links for contender in CONTENDERS]
    shift = r % len(pairs)
    yield from pairs[shift:] + pairs[:shift]


def _setups() -> dict[str, tuple[int, int | None]]:
    """Each run's key (its `c` in the report), concurrency and OUTBOX_BATCH_MAX (None: as set)."""
    setups: dict[str, tuple[int, int | None]] = {str(c): (c, None) for c in CONCURRENCIES}
    setups[TUNED] = (TUNED_CONCURRENCY, TUNED_BATCH_MAX)
    return setups


def _links_at(key: str) -> tuple[str, ...]:
    first = str(CONCURRENCIES[0])
    return LINKS if key == first else tuple(x for x in LINKS if x != "direct")


def scenario_slowlink(b: Bench) -> dict[str, Any]:
    """Durable and raw Celery drains over direct, proxy0 and proxy1 links at each of
    CONCURRENCIES, interleaved: every round runs each concurrency's pairs, order rotated."""
    from outbox.conf import outbox_settings

    db = db_name("backlog")
    ensure_database(db)
    use_target(db, b.broker(4))
    owner = bench_owner()
    jobs = {"durable": b.backlog, "raw_celery": min(RAW_JOBS, b.backlog)}
    links = {
        "direct": None,
        "proxy0": Link("proxy0", b.redis.port, 0.0),
        "proxy1": Link("proxy1", b.redis.port, DELAY_MS),
    }
    out: dict[str, Any] = {
        "jobs": jobs["durable"],
        "raw_jobs": jobs["raw_celery"],
        "concurrencies": list(CONCURRENCIES),
        "tuned": {"key": TUNED, "concurrency": TUNED_CONCURRENCY, "batch_max": TUNED_BATCH_MAX},
        "delay_ms": DELAY_MS,
        "rounds": b.rounds,
        "batch_max": outbox_settings.BATCH_MAX,
    }
    setups = _setups()
    default_batch_max = outbox_settings.BATCH_MAX  # the driver packs the messages
    rounds: dict[str, dict[str, list[LinkRound]]] = {
        key: {f"{k}_{x}": [] for k in CONTENDERS for x in _links_at(key)} for key in setups
    }
    try:
        out["round_trip_ms"] = {
            name: round_trip_ms(link, b.redis.port, db) for name, link in links.items()
        }
        log(f"  slowlink: measured round trips {out['round_trip_ms']}")
        for r in range(b.rounds):
            for key, (c, batch_max) in setups.items():
                set_setting("OUTBOX_BATCH_MAX", batch_max or default_batch_max)
                for contender, name in _order(r, _links_at(key)):
                    n = jobs[contender]
                    result = _one(b, links[name], contender, db, owner, n, c)
                    rounds[key][f"{contender}_{name}"].append(result)
                    extra = (
                        f"  round trips/job PG {result.pg_up / n:.3f}"
                        f" Redis {result.redis_up / n:.3f}"
                        if name != "direct"
                        else ""
                    )
                    log(
                        f"    c={key} {contender:10s} {name:6s} drain "
                        f"{result.drain.jobs_per_s:8.1f} jobs/s"
                        f"  submit {n / result.drain.submit_s:8.1f}/s{extra}"
                    )
    finally:
        set_setting("OUTBOX_BATCH_MAX", default_batch_max)
        point_driver((PG_HOST, PG_PORT))
        use_target(db_name("main"), b.broker())
        for link in links.values():
            if link is not None:
                link.close()
    out["runs"] = {key: _run_summary(rs) for key, rs in rounds.items()}
    return out


def _run_summary(rounds: dict[str, list[LinkRound]]) -> dict[str, Any]:
    """One concurrency's rows and ratios (a ratio of a pair not run is left out)."""
    pairs = {
        "durable_slow_vs_raw_slow": ("durable_proxy1", "raw_celery_proxy1"),
        "durable_slow_vs_durable_proxy0": ("durable_proxy1", "durable_proxy0"),
        "raw_slow_vs_raw_proxy0": ("raw_celery_proxy1", "raw_celery_proxy0"),
        "durable_proxy0_vs_raw_proxy0": ("durable_proxy0", "raw_celery_proxy0"),
        "durable_proxy0_vs_direct": ("durable_proxy0", "durable_direct"),
        "raw_proxy0_vs_direct": ("raw_celery_proxy0", "raw_celery_direct"),
    }
    return {
        "by_link": {key: _summary(rs) for key, rs in rounds.items()},
        "ratios": {
            name: _ratios(rounds, a, b)
            for name, (a, b) in pairs.items()
            if a in rounds and b in rounds
        },
    }
