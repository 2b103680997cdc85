"""The soak's clients: a web-like pool of threads submitting one job per request, and a
`jobs.submit_many` producer; closed loop (as fast as they can, for the capacity) or open loop
(Poisson arrivals at a fixed rate, whatever the system does)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIND = "noop"


class AcceptLog:
    """Every accepted job, appended to a file as it comes (id and the wall-clock time its
    submit call returned): the driver is the web-like process whose RSS the soak weighs, so
    its own bookkeeping stays out of memory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self.errors: list[str] = []
        self.error_count = 0
        self.slowest_submit = 0.0
        self.lock = threading.Lock()
        self._file = path.open("a", buffering=1 << 16)

    def add(self, ids: list[str], took: float) -> None:
        now = time.time()
        with self.lock:
            self._file.writelines(f"{pk} {now:.6f}\n" for pk in ids)
            self.count += len(ids)
            self.slowest_submit = max(self.slowest_submit, took)

    def error(self, exc: BaseException) -> None:
        with self.lock:
            self.error_count += 1
            if len(self.errors) < 20:
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])

    def close(self) -> None:
        with self.lock:
            self._file.close()

    def read(self) -> Iterator[tuple[str, float]]:
        """(job id, accepted at) of every accepted job, in order."""
        with self.path.open() as lines:
            for line in lines:
                pk, at = line.split()
                yield pk, float(at)

    def __len__(self) -> int:
        return self.count


def _close_connection() -> None:
    from django.db import connection

    connection.close()


@dataclass
class Load:
    """Submitting threads that run until `stop()`.

    rate None: closed loop (each thread submits again as soon as its call returned); else
    open loop at `rate` jobs/s in all, `many_share` of them through `submit_many` in groups of
    `group`. Each thread has its own Django connection, as a web server's threads do."""

    owner: Any
    log: AcceptLog
    threads: int = 4
    rate: float | None = None
    many_share: float = 0.5
    group: int = 50
    seed: int = 1
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        names = [f"web-{i}" for i in range(self.threads)]
        self._workers = [
            threading.Thread(target=self._web, args=(i,), name=n, daemon=True)
            for i, n in enumerate(names)
        ]
        if self.many_share > 0:
            self._workers.append(
                threading.Thread(target=self._producer, name="producer", daemon=True)
            )
        for thread in self._workers:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._workers:
            thread.join(60)

    def _arrivals(self, rate: float | None, rng: random.Random) -> Any:
        """Yield when the next call is due: at once (closed loop) or a Poisson process."""
        due = time.monotonic()
        while not self._stop.is_set():
            if rate:
                due += rng.expovariate(rate)
                wait = due - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    return
            yield

    def _call(self, submit: Any) -> None:
        began = time.perf_counter()
        try:
            jobs = submit()
        except Exception as exc:  # counted and shown: a refused submit is a finding
            self.log.error(exc)
            time.sleep(0.05)
            return
        self.log.add([str(job.pk) for job in jobs], time.perf_counter() - began)

    def _web(self, index: int) -> None:
        import jobs

        rng = random.Random(self.seed * 1000 + index)
        rate = self.rate * (1 - self.many_share) / self.threads if self.rate else None
        try:
            for _ in self._arrivals(rate, rng):
                self._call(lambda: [jobs.submit(kind=KIND, input={}, owner=self.owner)])
        finally:
            _close_connection()

    def _producer(self) -> None:
        import jobs

        rng = random.Random(self.seed * 1000 + 999)
        rate = self.rate * self.many_share / self.group if self.rate else None
        requests = [{"kind": KIND, "input": {}, "owner": self.owner}] * self.group
        try:
            for _ in self._arrivals(rate, rng):
                self._call(lambda: jobs.submit_many([dict(r) for r in requests]))
        finally:
            _close_connection()
