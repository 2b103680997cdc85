"""Fixtures of the network tests: a private network per test, echo servers, probes in hosts,
a RabbitMQ vhost and a site (a worker host behind fault proxies and one beside us)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from demo.guided.processes import point_celery_at
from tests.harness import ROOT, Harness, PrivateRedis
from tests.kinds_network import WATCH_DIR_ENV
from tests.network.hosts import HostHarness
from tests.network.netns import Host, Network, netns_available, private_network
from tests.network.proxy import fault_proxy
from tests.network.rabbitmq import (
    RABBITMQ,
    VHOST_PREFIX,
    Site,
    rabbitmq_up,
    rabbitmqctl,
    sweep_vhosts,
)


@pytest.fixture(scope="session")
def _netns_usable() -> None:
    reason = netns_available()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def network(_netns_usable: None) -> Iterator[Network]:
    """Hosts and service addresses of this test, all removed at teardown."""
    with private_network() as net:
        yield net


@pytest.fixture
def network_redis(network: Network, session_redis: PrivateRedis) -> Iterator[PrivateRedis]:
    """A Redis of this test's own on the service address "redis" (and loopback, where this
    process's Celery app publishes to it for the test's length)."""
    from tests.conftest import celery_on_private_redis

    address = network.service("redis")
    with celery_on_private_redis(back=session_redis.url, also_bind=(address,)) as redis:
        yield redis


class EchoServer(socketserver.ThreadingTCPServer):
    """Echoes what it reads; notes how each connection ended (eof, reset, still open)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int]) -> None:
        self.endings: list[str] = []
        super().__init__(address, _EchoHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _EchoHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: EchoServer = self.server  # type: ignore[assignment]
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
            server.endings.append("eof")
        except ConnectionResetError:
            server.endings.append("reset")
        except OSError as error:
            server.endings.append(type(error).__name__)


@contextlib.contextmanager
def echo_server(host: str) -> Iterator[EchoServer]:
    server = EchoServer((host, 0))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def echo(network: Network) -> Iterator[EchoServer]:
    """An echo server on the service address "echo"."""
    with echo_server(network.service("echo")) as server:
        yield server


class Probe:
    """tests.network.probe running inside a host (or here, host=None), one command at a time."""

    def __init__(self, host: Host | None) -> None:
        argv = [sys.executable, "-m", "tests.network.probe"]
        self.popen = subprocess.Popen(
            host.wrap(argv) if host else argv,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def __call__(self, *words: object) -> dict[str, Any]:
        assert self.popen.stdin and self.popen.stdout
        self.popen.stdin.write(" ".join(map(str, words)) + "\n")
        self.popen.stdin.flush()
        return json.loads(self.popen.stdout.readline())

    def close(self) -> None:
        self.popen.kill()
        self.popen.wait(timeout=10)


@pytest.fixture
def probe() -> Iterator[type[Probe]]:
    """Probe(host) starts a probe; all are killed at teardown."""
    made: list[Probe] = []

    class Tracked(Probe):
        def __init__(self, host: Host | None) -> None:
            super().__init__(host)
            made.append(self)

    yield Tracked
    for one in made:
        one.close()


def connect_error(address: str, port: int, timeout: float) -> str:
    """How a connect from this process ends: "" on success, else the exception's class."""
    try:
        socket.create_connection((address, port), timeout=timeout).close()
    except OSError as error:
        return type(error).__name__
    return ""


@pytest.fixture
def vhost() -> Iterator[str]:
    """A RabbitMQ vhost of this test only (guest may use it), deleted at teardown."""
    assert rabbitmq_up(), "RabbitMQ must run on 127.0.0.1:5672 (scripts/ensure-services.sh)"
    sweep_vhosts()
    name = f"{VHOST_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", name)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        yield name
    finally:
        rabbitmqctl("delete_vhost", name)


@pytest.fixture
def site(
    network: Network,
    vhost: str,
    session_redis: PrivateRedis,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Site]:
    """A host whose workers reach RabbitMQ (the test's vhost) and the test database through
    fault proxies on service addresses; this process and `root` workers use loopback."""
    amqp_address, pg_address = network.service("amqp"), network.service("pg")
    db = connection.settings_dict
    database = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    workdir = Path(tempfile.mkdtemp(prefix="jobs-rmq-net-"))
    (workdir / "media").mkdir()
    settings.MEDIA_ROOT = workdir / "media"
    monkeypatch.setenv(WATCH_DIR_ENV, str(tmp_path))  # watch_note reads it here too
    local_url = f"amqp://guest:guest@127.0.0.1:{RABBITMQ[1]}/{vhost}"
    point_celery_at(local_url)  # this process submits over loopback, into the test's vhost
    with (
        fault_proxy(RABBITMQ, host=amqp_address) as amqp_proxy,
        fault_proxy(database, host=pg_address) as pg_proxy,
    ):
        cut = HostHarness(
            broker_url=f"amqp://guest:guest@{amqp_address}:{amqp_proxy.port}/{vhost}",
            database_url=f"postgres://postgres@{pg_address}:{pg_proxy.port}/{db['NAME']}",
            workdir=workdir,
            media_root=workdir / "media",
        )
        cut.host = network.host()
        root = Harness(
            broker_url=local_url,
            database_url=f"postgres://postgres@{database[0]}:{database[1]}/{db['NAME']}",
            workdir=workdir,
            media_root=workdir / "media",
        )
        try:
            yield Site(cut.host, cut, root, tmp_path, vhost)
        finally:
            root.kill_all()
            cut.kill_all()
            point_celery_at(session_redis.url)
            if not os.environ.get("JOBS_TEST_KEEP_LOGS"):
                shutil.rmtree(workdir, ignore_errors=True)
