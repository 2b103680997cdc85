"""The network infrastructure itself: hosts reach services, cuts drop without RST, heals heal,
the proxy adds what it says, and nothing is left behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.harness import wait_until
from tests.network.conftest import EchoServer, Probe, connect_error, echo_server
from tests.network.netns import (
    NETNS_PREFIX,
    Host,
    Network,
    ip,
    owned,
    private_network,
    sweep_leftovers,
)
from tests.network.proxy import FaultProxy, fault_proxy


def connected(probe: type[Probe], host: Host | None, address: str, port: int) -> Probe:
    """A probe in `host` (None: in no namespace) holding a connection to address:port."""
    client = probe(host)
    result = client("connect", address, port, 2)
    assert result["ok"], result
    return client


@pytest.fixture
def proxied_echo() -> Iterator[FaultProxy]:
    """A fault proxy in front of an echo server, both on 127.0.0.1."""
    with echo_server("127.0.0.1") as echo, fault_proxy(("127.0.0.1", echo.port)) as proxy:
        yield proxy


def test_host__reaches_a_service_through_its_veth_only(
    network: Network, echo: EchoServer, probe: type[Probe]
) -> None:
    host = network.host()
    client = connected(probe, host, network.service("echo"), echo.port)
    assert client("echo", "hello", 2)["value"] == "hello"
    # The host has no route to anything else: not the machine's loopback services, not eth0.
    outside = probe(host)("connect", "10.213.254.254", 9, 1)
    assert outside["error"] == "OSError" and outside["errno"] == 101  # ENETUNREACH


def test_blackhole__connect_hangs_until_the_clients_own_timeout(
    network: Network, echo: EchoServer, probe: type[Probe]
) -> None:
    host = network.host()
    client = probe(host)
    host.blackhole()
    result = client("connect", network.service("echo"), echo.port, 1.5)
    assert result["error"] == "TimeoutError", result  # not refused, not unreachable: silence
    assert 1.4 <= result["seconds"] < 2.5, result
    host.heal()
    assert client("connect", network.service("echo"), echo.port, 2)["ok"]


def test_blackhole__stalls_an_established_connection_without_rst_and_heal_resumes_it(
    network: Network, echo: EchoServer, probe: type[Probe]
) -> None:
    host = network.host()
    client = connected(probe, host, network.service("echo"), echo.port)
    host.blackhole()
    stalled = client("echo", "lost", 1)
    assert stalled["error"] == "TimeoutError", stalled
    assert echo.endings == []  # the server saw nothing: no FIN, no RST
    host.heal()
    # The same connection carries on: TCP retransmits what the cut dropped, in order.
    resumed = client("echo", "back", 10)
    assert resumed["ok"] and resumed["value"] == "lost", resumed
    assert client("echo", "next", 2)["value"] == "back"


def test_blackhole__user_timeout_ends_a_stalled_connection_with_etimedout(
    network: Network, echo: EchoServer, probe: type[Probe]
) -> None:
    host = network.host()
    client = connected(probe, host, network.service("echo"), echo.port)
    client("user_timeout", 1000)
    host.blackhole()
    result = client("echo", "x", 10)
    assert result["errno"] == 110, result  # ETIMEDOUT from the kernel, not our recv timeout
    assert result["seconds"] < 3, result


def test_service_blackhole__cuts_that_service_both_ways_and_no_other(
    network: Network, echo: EchoServer, probe: type[Probe]
) -> None:
    host = network.host()
    with echo_server(network.service("other")) as other:
        host.blackhole("echo")
        cut = probe(host)("connect", network.service("echo"), echo.port, 1)
        assert cut["error"] == "TimeoutError", cut
        kept = connected(probe, host, network.service("other"), other.port)
        assert kept("echo", "fine", 2)["value"] == "fine"
        # The root side cannot reach the host from the cut service's side either.
        source = host.source_for(network.services["echo"])
        route = ip("route", "get", source).stdout
        assert host.ghost in route, route
        host.heal("echo")
        assert probe(host)("connect", network.service("echo"), echo.port, 2)["ok"]


def test_hosts__each_cut_on_its_own(network: Network, echo: EchoServer, probe: type[Probe]) -> None:
    cut, healthy = network.host(), network.host()
    cut.blackhole()
    assert probe(cut)("connect", network.service("echo"), echo.port, 0.5)["error"]
    assert probe(healthy)("connect", network.service("echo"), echo.port, 2)["ok"]


def test_proxy_delay__adds_twice_the_delay_to_a_round_trip(
    proxied_echo: FaultProxy, probe: type[Probe]
) -> None:
    proxy = proxied_echo
    client = connected(probe, None, *proxy.address)
    base = min(client("echo", "a", 2)["seconds"] for _ in range(5))
    proxy.delay(50)
    rtts = [client("echo", "b", 2)["seconds"] for _ in range(5)]
    assert all(0.1 <= rtt < 0.1 + base + 0.06 for rtt in rtts), (base, rtts)
    proxy.pass_through()
    assert client("echo", "c", 2)["seconds"] < 0.05


def test_proxy_reset__resets_open_and_new_connections(
    proxied_echo: FaultProxy, probe: type[Probe]
) -> None:
    proxy = proxied_echo
    client = connected(probe, None, *proxy.address)
    proxy.reset()
    assert client("echo", "x", 2)["error"] == "ConnectionResetError"
    fresh = probe(None)
    # Reset on accept: the RST may even beat connect()'s own check of the socket.
    first = fresh("connect", *proxy.address, 2)
    then = fresh("echo", "x", 2) if first["ok"] else first
    assert then["error"] == "ConnectionResetError", (first, then)
    proxy.pass_through()
    assert connect_error(*proxy.address, 2) == ""


def test_proxy_refuse__refuses_new_connections_and_keeps_open_ones(
    proxied_echo: FaultProxy, probe: type[Probe]
) -> None:
    proxy = proxied_echo
    client = connected(probe, None, *proxy.address)
    # A round trip first: connect() returns once the kernel has queued the connection, and
    # closing the listener resets one the proxy's loop has not accepted yet (CI saw that RST).
    assert client("echo", "before", 2)["value"] == "before"
    proxy.refuse()
    assert connect_error(*proxy.address, 2) == "ConnectionRefusedError"
    still = client("echo", "still", 2)
    assert still.get("value") == "still", still
    proxy.pass_through()
    assert connect_error(*proxy.address, 2) == ""


def test_proxy__forwards_from_a_host_to_a_loopback_service(
    network: Network, probe: type[Probe]
) -> None:
    """The way a host reaches a server that listens on 127.0.0.1 only (the shared PostgreSQL)."""
    host = network.host()
    with (
        echo_server("127.0.0.1") as echo,
        fault_proxy(("127.0.0.1", echo.port), host=network.service("loopback")) as proxy,
    ):
        client = connected(probe, host, *proxy.address)
        assert client("echo", "via", 2)["value"] == "via"


def test_private_network__leaves_no_namespace_or_link_behind(_netns_usable: None) -> None:
    with private_network() as net:
        service = net.service("a")
        host = net.host()
        net.host().blackhole()
        assert host.netns in ip("netns", "list").stdout
    assert owned(os.getpid()) == ([], [])
    left = ip("-4", "-o", "addr", "show").stdout
    for address in (f"{service}/", f"{host.root_address}/"):
        assert f"inet {address}" not in left
    assert host.ghost not in ip("-4", "route", "show").stdout


def test_sweep__removes_what_a_crashed_run_left(_netns_usable: None) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead_pid = int(gone.stdout)
    wait_until(lambda: not os.path.exists(f"/proc/{dead_pid}"), timeout=5, what="pid gone")
    ns = f"{NETNS_PREFIX}{dead_pid}-1"
    ip("netns", "add", ns)
    ip("link", "add", f"djn{dead_pid}-1r", "type", "veth", "peer", "name", f"djn{dead_pid}-1h")
    try:
        removed = sweep_leftovers()
        assert ns in removed and f"djn{dead_pid}-1r" in removed
        assert owned(dead_pid) == ([], [])
    finally:
        ip("netns", "del", ns, check=False)
        ip("link", "del", f"djn{dead_pid}-1r", check=False)


def test_blackhole__keeps_loopback_of_the_root_namespace_untouched(
    network: Network, echo: EchoServer
) -> None:
    """The test process reaches every service directly, whatever its hosts suffer."""
    network.host().blackhole()
    with socket.create_connection((network.service("echo"), echo.port), timeout=2) as sock:
        sock.sendall(b"ok")
        started = time.monotonic()
        assert sock.recv(2) == b"ok" and time.monotonic() - started < 1
