"""PostgreSQL CPU of one bench database: its backends' on-CPU time, sampled from /proc.

The machine is shared with test runs on the same PostgreSQL server, so the server-wide
total (every postgres process) is not ours. This sums, for the backends connected to the
bench database(s), the on-CPU time each spent while the meter ran (/proc/PID/schedstat, in
nanoseconds): a backend present at start counts from its reading then, one that appears later
from zero. A thread samples pg_stat_activity every `interval` seconds and keeps each pid's
highest reading, so a backend that exits mid-window loses at most its last interval.

Not counted: the server's shared background processes (WAL writer, checkpointer, background
writer), which serve every database of the server; see docs/benchmarks.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from bench.infra import pg_connect


def oncpu_ns(pid: int) -> int | None:
    """Nanoseconds a process has run on a CPU, or None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class PgCpuMeter:
    """`with PgCpuMeter(["dj_bench_main"]) as meter: ...`; then `meter.ms` (CPU ms in all).

    A thread about to close its connection calls `note_backend(pid)` (bench.scenarios does,
    for its submitting threads), so a short-lived backend is read at its end, not missed."""

    running: ClassVar[list[PgCpuMeter]] = []

    def __init__(
        self,
        dbs: list[str],
        *,
        interval: float = 0.2,
        exclude: set[int] | None = None,
        connect: Callable[[], Any] = pg_connect,
    ) -> None:
        self.dbs = dbs
        self.connect = connect  # to the server of `dbs` (the bench's, unless told)
        self.interval = interval
        self.exclude = exclude or set()
        self.base: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.own_cpu_s = 0.0  # this meter's thread CPU (taken out of the driver's figure)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: Any = None
        self._conn_lock = threading.Lock()

    def _pids(self) -> list[int]:
        with self._conn_lock:
            rows = self._conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = ANY(%s)", [self.dbs]
            ).fetchall()
        return [int(r[0]) for r in rows if int(r[0]) not in self.exclude]

    def sample(self, *, first: bool = False) -> None:
        for pid in self._pids():
            now = oncpu_ns(pid)
            if now is None:
                continue
            if pid not in self.base:
                self.base[pid] = now if first else 0
            self.last[pid] = max(self.last.get(pid, 0), now)

    def note(self, pid: int) -> None:
        now = oncpu_ns(pid)
        if now is not None and pid in self.last:  # a backend of ours, seen before
            self.last[pid] = max(self.last[pid], now)
        elif now is not None and pid not in self.exclude:
            with self._conn_lock:
                row = self._conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND datname = ANY(%s)",
                    [pid, self.dbs],
                ).fetchone()
            if row:
                self.base.setdefault(pid, 0)
                self.last[pid] = now

    def _run(self) -> None:
        started = time.thread_time()
        try:
            while not self._stop.wait(self.interval):
                self.sample()
        finally:
            self.own_cpu_s += time.thread_time() - started

    def start(self) -> PgCpuMeter:
        self._conn = self.connect()
        self.sample(first=True)
        self._thread = threading.Thread(target=self._run, name="pg-cpu-meter", daemon=True)
        self._thread.start()
        PgCpuMeter.running.append(self)
        return self

    def stop(self) -> float:
        if self in PgCpuMeter.running:
            PgCpuMeter.running.remove(self)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        self._conn.close()
        return self.ms

    @property
    def ms(self) -> float:
        return sum(self.last[p] - self.base[p] for p in self.last if p not in self.exclude) / 1e6

    def __enter__(self) -> PgCpuMeter:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def note_backend(pid: int) -> None:
    """Read a backend's CPU now, for every running meter: its connection is about to close."""
    for meter in list(PgCpuMeter.running):
        meter.note(pid)
