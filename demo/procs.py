"""Child processes owned by pid: start, inspect, stop. No Django here, so the test harness and
the chaos soak can use it before (or without) Django's setup."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _celery(app: str, command: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", app, command, "--loglevel=INFO"]


def celery_worker_argv(
    name: str,
    *,
    app: str = "jobsite",
    queues: str = "jobs",
    concurrency: int = 1,
    pool: str = "prefork",
    args: tuple[str, ...] = (),
) -> list[str]:
    """`celery worker` as the tests and benchmarks run it: quiet (no gossip, mingle or
    heartbeat events), named `name@host`."""
    return [
        *_celery(app, "worker"),
        f"--queues={queues}",
        f"--concurrency={concurrency}",
        f"--pool={pool}",
        f"--hostname={name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        *args,
    ]


def celery_beat_argv(workdir: Path, name: str, *, app: str = "jobsite") -> list[str]:
    """`celery beat` with its schedule file and pidfile under `workdir`, named after `name`
    (two beats need two of each)."""
    return [
        *_celery(app, "beat"),
        f"--schedule={workdir / name}-schedule",
        f"--pidfile={workdir / name}.pid",
    ]


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


def redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False
