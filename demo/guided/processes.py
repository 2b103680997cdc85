"""The demo's child processes: a private redis-server, workers, relay, provider; stop by pid."""

from __future__ import annotations

__all__ = ["Child", "child_pids", "free_port", "process_alive", "redis_ping"]

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from demo.procs import Child, child_pids, free_port, process_alive, redis_ping

ROOT = Path(settings.BASE_DIR)
DEMO_HANDLER_MODULE = "demo.demo_kinds"


class DemoFailed(RuntimeError):
    """A process the demo needs would not start, or a wait ran out of time."""


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


def provider_call(port: int, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
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
    """Publish from this process (the fast path after submit) to `url`, whatever the
    environment says: Celery prefers CELERY_BROKER_URL from the environment to its conf."""
    from outbox.transport import celery_app

    os.environ["CELERY_BROKER_URL"] = url
    app = celery_app()
    app.conf.broker_url = url  # type: ignore[misc]
    # Drop our handles only (kombu keeps one global pool per broker URL); the producer pool
    # would otherwise keep publishing to the previous broker.
    app._pool = None  # type: ignore[attr-defined]
    app.amqp._producer_pool = None  # type: ignore[attr-defined]


def stale_writes_logged(worker: Child) -> list[str]:
    """Which fenced writes a worker saw rejected ('heartbeat', 'complete', ...), from its log."""
    marker = "stale write rejected at "
    return [
        line.split(marker, 1)[1].strip() for line in worker.log().splitlines() if marker in line
    ]
