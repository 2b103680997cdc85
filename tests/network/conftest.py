"""Fixtures of the network tests: a private network per test, echo servers, probes in hosts."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness import ROOT
from tests.network.netns import Host, Network, netns_available, private_network


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
        return json.loads(self.popen.stdout.readline())  # type: ignore[no-any-return]

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
