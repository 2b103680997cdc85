"""Real processes for tests: celery workers, the relay, the provider, private servers.

Everything started here is stopped by pid at teardown, and private servers (a Redis of our
own) are always restored or removed, even when the test fails.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.procs import (
    Child,
    celery_beat_argv,
    celery_worker_argv,
    child_pids,
    free_port,
    redis_ping,
)

ROOT = Path(__file__).resolve().parent.parent

__all__ = [
    "ROOT",
    "Harness",
    "PrivateRedis",
    "Proc",
    "free_port",
    "harness_for",
    "queue_envelopes",
    "queue_length",
    "wait_until",
]

# kombu's Redis transport keeps a queue's messages in one list per priority step: the queue's
# own name for step 0, `<queue>\x06\x16<step>` for 3, 6 and 9; consumers pop them in that
# order. The outbox publishes each priority band to its own step (outbox.batching).
PRIORITY_STEPS = (0, 3, 6, 9)


def queue_keys(queue: str) -> list[str]:
    """The Redis lists of `queue`, in the order consumers take from them."""
    return [queue] + [f"{queue}\x06\x16{step}" for step in PRIORITY_STEPS[1:]]


def queue_envelopes(client: Any, queue: str = "jobs") -> list[bytes]:
    """Every raw message waiting in `queue`, in the order consumers will take them: list by
    list, oldest first within each (kombu pushes to the head)."""
    raw: list[bytes] = []
    for key in queue_keys(queue):
        raw.extend(reversed(client.lrange(key, 0, -1)))
    return raw


def queue_length(client: Any, queue: str = "jobs") -> int:
    """Messages waiting in `queue`, every priority list counted."""
    return sum(int(client.llen(key)) for key in queue_keys(queue))


def wait_until(
    condition: Callable[[], Any],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Poll `condition` until it returns something truthy; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def test_database_url() -> str:
    from django.db import connection

    s = connection.settings_dict
    host, port = s["HOST"] or "127.0.0.1", s["PORT"] or 5432
    return f"postgres://{s['USER'] or 'postgres'}@{host}:{port}/{s['NAME']}"


@dataclass
class Proc(Child):
    """A process a test started (demo.procs.Child), plus signals for the drills."""

    def children(self) -> list[int]:
        return child_pids(self.pid)

    def pool_child(self, *, timeout: float = 30.0) -> int:
        """The pid of a `--concurrency=1` prefork worker's one pool process."""
        children = wait_until(self.children, timeout=timeout, what=f"{self.name}'s pool process")
        assert len(children) == 1, children
        return int(children[0])

    def ready_or_exited(self) -> bool:
        """A celery worker's "ready." is in its log, or it has exited already."""
        return "ready." in self.log() or not self.alive()

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def stop(self, timeout: float = 3.0) -> None:
        """Tests need no long warm shutdown: a short grace, then SIGKILL (see Child.stop)."""
        super().stop(timeout)


DRILL_MODULE = "demo.drill_kinds"


def handler_modules(env: dict[str, str]) -> list[str]:
    """JOBS_HANDLER_MODULES of a child's environment, as a list."""
    return [m.strip() for m in env.get("JOBS_HANDLER_MODULES", "").split(",") if m.strip()]


@dataclass
class Harness:
    """Starts real processes against the test database and a broker URL; stops them all."""

    broker_url: str
    database_url: str
    workdir: Path
    media_root: Path
    procs: list[Proc] = field(default_factory=list)
    provider_port: int | None = None

    def base_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(
            {
                "DATABASE_URL": self.database_url,
                "CELERY_BROKER_URL": self.broker_url,
                "JOBS_MEDIA_ROOT": str(self.media_root),
                "PYTHONPATH": str(ROOT),
                "DJANGO_SETTINGS_MODULE": "jobsite.settings",
                "DATABASE_CONN_MAX_AGE": "0",
                "CELERY_WORKER_SEND_TASK_EVENTS": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.provider_port:
            env["NOTIFY_PROVIDER_URL"] = f"http://127.0.0.1:{self.provider_port}/notify"
        env.update(extra)
        # The suite's processes know the drill kinds, as tests.settings makes this one know
        # them: jobsite.settings alone never registers them.
        modules = handler_modules(env)
        if DRILL_MODULE not in modules:
            env["JOBS_HANDLER_MODULES"] = ",".join([*modules, DRILL_MODULE])
        return env

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        log_path = self.workdir / f"{name}.log"
        handle = open(log_path, "ab")  # noqa: SIM115 - closed by the child's exit
        popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
        handle.close()
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def start_worker(
        self,
        name: str,
        *,
        concurrency: int = 1,
        queues: str = "jobs",
        pool: str = "prefork",
        wait: bool = True,
        args: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        **env_extra: str,
    ) -> Proc:
        """A `celery worker`; `env` and `env_extra` add to its environment (a prepared mapping
        goes in `env`: mypy checks a `**mapping` against every keyword parameter)."""
        child_env = self.base_env(JOBS_WORKER_NAME=name, **{**(env or {}), **env_extra})
        argv = celery_worker_argv(
            name, queues=queues, concurrency=concurrency, pool=pool, args=args
        )
        proc = self.spawn(name, argv, child_env)
        if wait:
            wait_until(
                proc.ready_or_exited,
                timeout=60,
                what=f"worker {name} to be ready",
            )
            assert proc.alive(), f"worker {name} died at start:\n{proc.log()[-3000:]}"
        return proc

    def start_beat(
        self, name: str = "beat", *, env: Mapping[str, str] | None = None, **env_extra: str
    ) -> Proc:
        """A `celery beat` (demo.procs.celery_beat_argv) with this harness's environment."""
        argv = celery_beat_argv(self.workdir, name)
        return self.spawn(name, argv, self.base_env(**{**(env or {}), **env_extra}))

    def start_relay(
        self, *, interval: float = 0.1, env: Mapping[str, str] | None = None, **env_extra: str
    ) -> Proc:
        argv = [sys.executable, "manage.py", "outbox_relay", "--loop", f"--interval={interval}"]
        extra = {**(env or {}), **env_extra}
        return self.spawn(f"relay-{len(self.procs)}", argv, self.base_env(**extra))

    def start_provider(self, *, work_seconds: float = 0.0) -> Proc:
        self.provider_port = free_port()
        argv = [
            sys.executable,
            "manage.py",
            "notify_provider",
            "--port",
            str(self.provider_port),
            "--work-seconds",
            str(work_seconds),
        ]
        proc = self.spawn("provider", argv, self.base_env())
        wait_until(lambda: self._provider_up(), timeout=30, what="provider to listen")
        return proc

    def _provider_up(self) -> bool:
        try:
            self.provider_stats()
        except OSError:
            return False
        return True

    def provider_url(self, path: str) -> str:
        assert self.provider_port, "start_provider() first"
        return f"http://127.0.0.1:{self.provider_port}{path}"

    def provider_stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.provider_url("/stats"), timeout=5) as response:
            return json.loads(response.read())

    def provider_control(self, **settings: Any) -> dict[str, Any]:
        request = urllib.request.Request(
            self.provider_url("/control"),
            data=json.dumps(settings).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def manage(
        self,
        *args: str,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        **env_extra: str,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.base_env(**{**(env or {}), **env_extra}),
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def broker_idle(self, queue: str = "jobs") -> bool:
        """Nothing waiting in a Redis queue, nothing delivered but unacked (kombu's `unacked`)."""
        import redis

        client = redis.Redis.from_url(self.broker_url)
        try:
            return queue_length(client, queue) == 0 and int(client.hlen("unacked")) == 0
        finally:
            client.close()

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def kill_all(self) -> None:
        """The test is over: SIGKILL every process (and its pool children) at once. A warm
        shutdown proves nothing at this point and costs a Celery worker about 3 s; a test that
        drills a shutdown stops its processes itself, before it asserts."""
        for proc in reversed(self.procs):
            proc.stop(timeout=0.0)


class PrivateRedis:
    """A Redis server of the test's own (so it can be killed without touching anyone else)."""

    def __init__(self, *, also_bind: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.also_bind = also_bind  # addresses besides 127.0.0.1 (tests/network hosts')
        self.dir = Path(tempfile.mkdtemp(prefix="jobs-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        redis_server = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.proc = subprocess.Popen(
            [
                redis_server,
                "--bind",
                "127.0.0.1",
                *self.also_bind,
                # Protected mode refuses every address but loopback to a server without a
                # password; also_bind names only addresses of the test's own namespaces.
                "--protected-mode",
                "no" if self.also_bind else "yes",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self.ping, timeout=15, what="private redis to answer")

    def ping(self) -> bool:
        return redis_ping(self.port)

    def kill(self) -> None:
        """Lose everything it held, as a crashed Redis without persistence does."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def harness_for(broker_url: str) -> Iterator[Harness]:
    workdir = Path(tempfile.mkdtemp(prefix="jobs-harness-"))
    media = workdir / "media"
    media.mkdir()
    harness = Harness(
        broker_url=broker_url, database_url=test_database_url(), workdir=workdir, media_root=media
    )
    try:
        yield harness
    finally:
        harness.kill_all()
        keep = os.environ.get("JOBS_TEST_KEEP_LOGS")
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def broker_job_ids(broker_url: str, queue: str = "jobs") -> list[str]:
    """The job id of every message waiting in a Redis queue (kombu JSON bodies, task protocol
    2: [args, kwargs, embed]); a `jobs.execute_many` message counts once per job it carries."""
    import redis

    client = redis.Redis.from_url(broker_url)
    try:
        raw = queue_envelopes(client, queue)
    finally:
        client.close()
    ids: list[str] = []
    for item in raw:
        kwargs = json.loads(base64.b64decode(json.loads(item)["body"]))[1]
        if "items" in kwargs:
            ids.extend(str(one["job_id"]) for one in kwargs["items"])
        else:
            ids.append(str(kwargs["job_id"]))
    return ids


class ClosingBroker:
    """A TCP port that accepts every connection and closes it at once (a broker going down),
    counting the connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                self.accepted += 1
                conn.close()

    def close(self) -> None:
        self.sock.close()
