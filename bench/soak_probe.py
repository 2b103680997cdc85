"""What the soak watches while it runs: table health, the xmin horizon, the relay's scan, RSS.

A `Probe` thread samples every few seconds over its own autocommit connection (it holds no
snapshot between samples, so it never pins the horizon it measures). `LongTransaction` is
the MVCC trap: a second client in REPEATABLE READ with a snapshot taken, held for a window.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg

from bench.cpu_split import proc_cpu, tree_cpu
from demo.procs import child_pids

# Every jobs_*/outbox_* table: live and dead tuples, total size (heap + indexes + toast) and
# autovacuum's count, in one statement.
TABLES_SQL = """
SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid), autovacuum_count
FROM pg_stat_user_tables
WHERE relname LIKE 'jobs\\_%' OR relname LIKE 'outbox\\_%'
"""
INDEXES_SQL = """
SELECT indexrelname, relname, pg_relation_size(indexrelid)
FROM pg_stat_user_indexes
WHERE relname LIKE 'jobs\\_%' OR relname LIKE 'outbox\\_%'
"""
# The oldest snapshot any backend of the cluster holds (what autovacuum may not clean past),
# and how long the oldest open transaction has been open.
HORIZON_SQL = """
SELECT COALESCE(max(age(backend_xmin)), 0),
       COALESCE(EXTRACT(EPOCH FROM now() - min(xact_start)), 0)
FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
"""
# The relay sweep's scan (outbox.relay._reserve's first query, read-only: no FOR UPDATE, so
# the probe never takes a row the relay wants), timed by the server itself.
# The relay's sweep as it runs it (outbox.relay): the floor, found from the previous one
# (outbox.floors), then the due rows from the floor; and the same due query from the start of
# the index, the walk each sweep made before the floors and makes once a minute now.
FLOOR_SQL = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT available_at FROM outbox_outboxentry
WHERE published_at IS NULL AND available_at >= %(after)s ORDER BY available_at LIMIT 1
"""
FLOOR_VALUE_SQL = """
SELECT least(min(available_at), now()) - make_interval(secs => %(margin)s)
FROM (SELECT available_at FROM outbox_outboxentry
      WHERE published_at IS NULL AND available_at >= %(after)s
      ORDER BY available_at LIMIT 1) oldest
"""
SWEEP_SQL = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id FROM outbox_outboxentry
WHERE published_at IS NULL AND available_at <= now() AND available_at >= %(floor)s
  AND (reserved_until IS NULL OR reserved_until < now())
ORDER BY available_at, id LIMIT 125
"""
OUTBOX_SQL = """
SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(available_at)), 0)
FROM outbox_outboxentry
WHERE published_at IS NULL AND available_at <= now() AND available_at >= %(floor)s
"""
# What each busy backend is running and waiting on, looked at many times a second: over a
# minute, how often a statement was seen running is its share of the database's busy time
# (sampling, as an "active session history"). pg_stat_statements would say it exactly, but
# loading it takes a restart of the private cluster, and every run of this bench whose cluster
# was restarted before the load (with or without the library: 4 runs, 382-521 jobs/s against
# 1,071-1,879 without a restart) measured a third of the capacity; the cause is not found.
ACTIVE_SQL = """
SELECT query, coalesce(wait_event_type || ':' || wait_event, 'CPU'),
       application_name
FROM pg_stat_activity
WHERE state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
"""
ACTIVE_EVERY_S = 0.05
FLOOR_MARGIN_S = 5.0  # OUTBOX_SCAN_FLOOR_MARGIN_SECONDS' default
FLOOR_FULL_S = 60.0  # OUTBOX_SCAN_FLOOR_FULL_SECONDS' default
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
SETTINGS = (
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_limit",
    "autovacuum_vacuum_cost_delay",
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "max_connections",
)


def server_settings(conninfo: str, names: Iterable[str] = SETTINGS) -> dict[str, str]:
    """The settings in force of `names`: by default those that decide how dead tuples are
    cleaned up."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            [list(names)],
        ).fetchall()
    return {name: str(value) for name, value in rows}


def rss_kb(pid: int) -> int:
    """VmRSS of one process in kB (0 once it is gone)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tree_pids(pid: int) -> list[int]:
    """The process and its descendants."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(child_pids(current))
    return out


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return raw.replace(b"\0", b" ").decode("ascii", "replace")
    return ""


@dataclass
class ClusterCpu:
    """CPU seconds the PostgreSQL cluster used so far, and its autovacuum workers' share: a
    child's seconds are counted while it lives (sampled) and, once it has exited, in the
    postmaster's reaped children's total (/proc/<pid>/stat cutime and cstime)."""

    postmaster: int
    _last: dict[int, float] = field(default_factory=dict)
    autovacuum_s: float = 0.0

    def read(self) -> tuple[float, float]:
        """(cluster total, autovacuum workers) CPU seconds so far."""
        seen: dict[int, float] = {}
        for pid in child_pids(self.postmaster):
            if "autovacuum worker" in _cmdline(pid):
                seen[pid] = proc_cpu(pid)
                self.autovacuum_s += seen[pid] - self._last.get(pid, 0.0)
        self._last = seen
        return round(tree_cpu(self.postmaster), 2), round(self.autovacuum_s, 2)


def _ms(plan: list[dict[str, Any]]) -> float:
    return float(plan[0].get("Execution Time", 0.0)) if plan else 0.0


def _buffers(plan: list[dict[str, Any]]) -> int:
    top = plan[0].get("Plan", {}) if plan else {}
    return int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))


@dataclass
class Sample:
    """One look at the database and the processes, `t` seconds into the load."""

    t: float
    tables: dict[str, dict[str, int]]
    indexes: dict[str, int]
    index_tables: dict[str, str]  # index -> its table
    xmin_age: int
    oldest_xact_s: float
    sweep_ms: float  # the floor and the due rows from it, as the relay's sweep runs them
    sweep_buffers: int
    full_walk_ms: float  # the due rows from the start of the index (once a minute)
    outbox_due: int
    outbox_lag_s: float
    rss_kb: dict[str, int]  # process name (and "name/pid" for each pool child) -> kB
    cpu_s: dict[str, float] = field(default_factory=dict)  # name -> CPU seconds so far


@dataclass
class _Looping:
    """A daemon thread running the subclass's `_run` from `start()` until `stop()`."""

    thread_name: ClassVar[str]
    _stop: threading.Event = field(default_factory=threading.Event, kw_only=True)
    _thread: threading.Thread | None = field(default=None, kw_only=True)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        raise NotImplementedError


@dataclass
class Probe(_Looping):
    """Samples every `every` seconds until stopped; `processes()` names the pids to weigh."""

    thread_name = "soak-probe"

    conninfo: str
    started: float
    processes: Callable[[], dict[str, int]]
    every: float = 5.0
    cluster: ClusterCpu | None = None  # the PostgreSQL cluster's CPU, when its pid is known
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _floor: dt.datetime = EPOCH
    _floor_full_at: float = -float("inf")

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self.conninfo, autocommit=True, application_name="soak-probe"
                    )
                self.samples.append(self.sample(conn))
            except psycopg.Error as exc:
                self.errors.append(f"{time.monotonic() - self.started:.0f}s: {exc}"[:300])
                conn = None
            self._stop.wait(max(0.0, self.every - (time.monotonic() - began)))
        if conn is not None:
            conn.close()

    def _sweep(
        self, conn: psycopg.Connection[Any]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dt.datetime]:
        """The relay's sweep, floor first (outbox.floors: from the previous floor, from the
        start once a minute); returns both plans and the floor."""
        began = time.monotonic()
        full = began - self._floor_full_at >= FLOOR_FULL_S
        after = {"after": EPOCH if full else self._floor, "margin": FLOOR_MARGIN_S}
        (floor_plan,) = conn.execute(FLOOR_SQL, after).fetchone() or ([{}],)
        row = conn.execute(FLOOR_VALUE_SQL, after).fetchone()
        assert row is not None
        self._floor = row[0]
        if full:
            self._floor_full_at = began
        (sweep_plan,) = conn.execute(SWEEP_SQL, {"floor": self._floor}).fetchone() or ([{}],)
        return floor_plan, sweep_plan, self._floor

    def sample(self, conn: psycopg.Connection[Any]) -> Sample:
        t = round(time.monotonic() - self.started, 1)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        tables = {
            name: {"live": int(live), "dead": int(dead), "bytes": int(size), "autovacuums": int(n)}
            for name, live, dead, size, n in conn.execute(TABLES_SQL).fetchall()
        }
        rows = conn.execute(INDEXES_SQL).fetchall()
        indexes = {name: int(size) for name, _, size in rows}
        index_tables = {name: str(table) for name, table, _ in rows}
        horizon = conn.execute(HORIZON_SQL).fetchone()
        assert horizon is not None
        floor_plan, sweep_plan, floor = self._sweep(conn)
        (full,) = conn.execute(SWEEP_SQL, {"floor": EPOCH}).fetchone() or ([{}],)
        backlog = conn.execute(OUTBOX_SQL, {"floor": floor}).fetchone()
        assert backlog is not None
        return Sample(
            t=t,
            tables=tables,
            indexes=indexes,
            index_tables=index_tables,
            xmin_age=int(horizon[0]),
            oldest_xact_s=round(float(horizon[1]), 1),
            sweep_ms=round(_ms(floor_plan) + _ms(sweep_plan), 3),
            sweep_buffers=_buffers(floor_plan) + _buffers(sweep_plan),
            full_walk_ms=round(_ms(full), 3),
            outbox_due=int(backlog[0]),
            outbox_lag_s=round(float(backlog[1]), 2),
            rss_kb=self.weigh(),
            cpu_s=self.cpu(),
        )

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each named process tree and of the database cluster."""
        out: dict[str, float] = {}
        for name, pid in self.processes().items():
            # The driver (web) started every other process: its tree would count them all.
            out[name] = round(proc_cpu(pid) if name == "web" else tree_cpu(pid), 2)
        if self.cluster is not None:
            out["postgres"], out["autovacuum"] = self.cluster.read()
        return out

    def weigh(self) -> dict[str, int]:
        """RSS of each named process tree (summed) and of each process in it."""
        out: dict[str, int] = {}
        for name, pid in self.processes().items():
            # The driver (web) started every other process: its tree would weigh them all.
            pids = [pid] if name == "web" else tree_pids(pid)
            sizes = {p: rss_kb(p) for p in pids}
            out[name] = sum(sizes.values())
            if len(pids) > 1:
                out.update({f"{name}/{p}": kb for p, kb in sizes.items()})
        return out


@dataclass
class LongTransaction(_Looping):
    """A second client holding a REPEATABLE READ snapshot from `begin` to `end` seconds."""

    thread_name = "soak-long-xact"

    conninfo: str
    started: float
    begin: float
    end: float
    opened_at: float | None = None
    closed_at: float | None = None
    snapshot_xmin: int | None = None

    def _wait_until(self, at: float) -> bool:
        return not self._stop.wait(max(0.0, self.started + at - time.monotonic()))

    def _run(self) -> None:
        if not self._wait_until(self.begin):
            return
        with psycopg.connect(self.conninfo, application_name="soak-long-xact") as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            # The first statement takes the snapshot; from here on it pins the xmin horizon.
            conn.execute("SELECT count(*) FROM jobs_job").fetchone()
            row = conn.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())").fetchone()
            self.snapshot_xmin = int(row[0]) if row else None
            self.opened_at = round(time.monotonic() - self.started, 1)
            self._wait_until(self.end)
            conn.rollback()
            self.closed_at = round(time.monotonic() - self.started, 1)


_LITERALS = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d+)?\b")
_LISTS = re.compile(r"\((?:\s*\?\s*,)+\s*\?\s*\)")


def shape(query: str) -> str:
    """A statement's text with its literals as `?` and its IN lists as `(...)`: Django
    sends its parameters inlined, so the same query from two calls reads the same here."""
    text = _LITERALS.sub("?", " ".join(query.split()))
    return _LISTS.sub("(...)", text)


@dataclass
class ActiveSessions(_Looping):
    """Samples the busy backends every ACTIVE_EVERY_S until stopped: `seen[minute]` counts
    (statement, wait) pairs (ACTIVE_SQL above); `texts[minute]` the statements' texts, their
    literals blanked (`shape`), by process; `looks[minute]` the samples."""

    thread_name = "soak-active"

    conninfo: str
    started: float
    label: Callable[[str], str]
    seen: dict[int, dict[str, int]] = field(default_factory=dict)
    texts: dict[int, dict[str, int]] = field(default_factory=dict)
    looks: dict[int, int] = field(default_factory=dict)
    error: str = ""  # why sampling stopped early (the report has fewer looks from then on)

    def _run(self) -> None:
        try:
            self._sample()
        except psycopg.Error as exc:
            self.error = f"{time.monotonic() - self.started:.0f}s: {exc}"[:300]

    def _sample(self) -> None:
        with psycopg.connect(
            self.conninfo, autocommit=True, application_name="soak-active"
        ) as conn:
            while not self._stop.wait(ACTIVE_EVERY_S):
                minute = int((time.monotonic() - self.started) // 60)
                counts = self.seen.setdefault(minute, {})
                texts = self.texts.setdefault(minute, {})
                self.looks[minute] = self.looks.get(minute, 0) + 1
                for query, wait, who in conn.execute(ACTIVE_SQL).fetchall():
                    who = who.removeprefix("soak-")
                    key = f"{self.label(query)} ({who}) | {wait}"
                    counts[key] = counts.get(key, 0) + 1
                    text = f"({who}) {shape(query)}"
                    texts[text] = texts.get(text, 0) + 1
