"""Hosts as network namespaces, with a true kernel-level blackhole (the peer sees no RST).

Layout, all in 10.213.0.0/16 (private, never routed off this machine):

- service addresses 10.213.0.<k>/32 live on a port-less bridge in the root namespace
  (`djn<pid>-s`, a bridge because this kernel has no dummy links): servers and proxies of the
  root namespace listen on them, beside 127.0.0.1.
- host <n> is the namespace `djnet-<pid>-<n>` joined by the veth pair `djn<pid>-<n>r` (root
  side, 10.213.<n>.1/28) / `djn<pid>-<n>h` (host side, 10.213.<n>.2/28). The host has no
  default route: it reaches the service addresses and nothing else. It talks to service k from
  a source address of its own (10.213.<n>.<2+k>), so one service can be cut in both directions.

Faults are made without netfilter or tc (neither works here): every neighbour entry is
static, and a cut points a next hop at a MAC address nobody has. The frames still leave, and
the receiving veth drops them as addressed to another host: no RST, no ICMP, no ARP failure,
exactly a partition. A whole host is cut by its neighbour entries, one service by its routes.

Everything is named with the creating pid, so `sweep_leftovers()` can remove what a crashed
run left behind; `private_network()` removes everything it made, also when the test fails.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import itertools
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BASE = "10.213"
NETWORK_CIDR = f"{BASE}.0.0/16"  # every host's and service's address: for pg_hba.conf
NETNS_PREFIX = "djnet-"
LINK_PREFIX = "djn"
GHOST_MAC = "02:00:5e:00:de:ad"  # a locally administered MAC no interface here carries
GHOST_OCTET = 14  # the next hop of a cut path, inside each host's /28
MAX_SERVICES = 10  # source addresses .3 .. .12 of each host's /28
_LOCK_PATH = Path("/tmp/djnet.lock")  # allocation across concurrent test sessions
_LINK_RE = re.compile(rf"^{LINK_PREFIX}(\d+)-\w+")
_NETNS_RE = re.compile(rf"^{NETNS_PREFIX}(\d+)-\d+$")
_serials = itertools.count(1)  # host numbers of this process, never reused


class NetworkUnavailable(RuntimeError):
    """This machine cannot make namespaces (not root, no `ip netns`)."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `ip ARGS`; a failure raises with ip's own message."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def netns_available() -> str:
    """Why this machine cannot run the network tests, or "" when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        probe = f"{NETNS_PREFIX}{os.getpid()}-probe"
        ip("netns", "add", probe)
        ip("netns", "del", probe)
    except (OSError, RuntimeError) as error:
        return f"cannot make network namespaces: {error}"
    return ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_names() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()]


def _link_names() -> list[str]:
    out = ip("-o", "link", "show").stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def owned(pid: int) -> tuple[list[str], list[str]]:
    """The namespaces and root-side links a run with this pid made (and has not removed)."""
    namespaces = [n for n in _netns_names() if (m := _NETNS_RE.match(n)) and int(m[1]) == pid]
    links = [n for n in _link_names() if (m := _LINK_RE.match(n)) and int(m[1]) == pid]
    return namespaces, links


def sweep_leftovers() -> list[str]:
    """Remove the namespaces and links of runs whose process is gone; returns their names."""
    removed: list[str] = []
    for name in _netns_names():
        if (m := _NETNS_RE.match(name)) and not _pid_alive(int(m[1])):
            ip("netns", "del", name, check=False)
            removed.append(name)
    for name in _link_names():
        if (m := _LINK_RE.match(name)) and not _pid_alive(int(m[1])):
            ip("link", "del", name, check=False)  # a veth's peer goes with it
            removed.append(name)
    return removed


@contextlib.contextmanager
def _allocation_lock() -> Iterator[None]:
    with open(_LOCK_PATH, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _addresses_in_use() -> set[ipaddress.IPv4Address]:
    """Every 10.213.x.y address of the root namespace and of every namespace on the machine."""
    outputs = [ip("-4", "-o", "addr", "show").stdout]
    for name in _netns_names():
        outputs.append(ip("-n", name, "-4", "-o", "addr", "show", check=False).stdout)
    found = re.findall(rf"inet ({re.escape(BASE)}\.\d+\.\d+)", "\n".join(outputs))
    return {ipaddress.IPv4Address(a) for a in found}


def _mac(name: str, netns: str | None = None) -> str:
    args = ["-n", netns] if netns else []
    out = ip(*args, "-o", "link", "show", name).stdout
    match = re.search(r"link/ether ([0-9a-f:]{17})", out)
    assert match, out
    return match[1]


@dataclass
class Service:
    """An address of the root namespace that hosts reach through their veth."""

    name: str
    index: int  # 1..MAX_SERVICES: which source address each host uses for it
    address: str


@dataclass
class Host:
    """A network namespace behind one veth pair; its processes reach only the services."""

    network: Network
    netns: str
    root_if: str
    host_if: str
    subnet: int  # the third octet: 10.213.<subnet>.0/28
    root_mac: str = ""
    host_mac: str = ""
    cut: set[str] = field(default_factory=set)  # services cut one by one
    whole_cut: bool = False

    @property
    def root_address(self) -> str:
        return f"{BASE}.{self.subnet}.1"

    @property
    def address(self) -> str:
        return f"{BASE}.{self.subnet}.2"

    def source_for(self, service: Service) -> str:
        return f"{BASE}.{self.subnet}.{2 + service.index}"

    @property
    def ghost(self) -> str:
        return f"{BASE}.{self.subnet}.{GHOST_OCTET}"

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run inside this host (for harness.spawn, subprocess.run, ...)."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(self, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 60)
        return subprocess.run(self.wrap(argv), **kwargs)  # type: ignore[call-overload]

    def _ns(self, *args: str) -> None:
        ip("-n", self.netns, *args)

    def _up(self) -> None:
        """Make the pair, its addresses and its static neighbours (no ARP, ever)."""
        ip("link", "add", self.root_if, "type", "veth", "peer", "name", self.host_if)
        ip("link", "set", self.host_if, "netns", self.netns)
        ip("addr", "add", f"{self.root_address}/28", "dev", self.root_if)
        ip("link", "set", self.root_if, "up")
        self._ns("link", "set", "lo", "up")
        self._ns("addr", "add", f"{self.address}/28", "dev", self.host_if)
        self._ns("link", "set", self.host_if, "up")
        self.root_mac, self.host_mac = _mac(self.root_if), _mac(self.host_if, self.netns)
        self._neighbours(cut=False)
        ip("neigh", "replace", self.ghost, "lladdr", GHOST_MAC, "dev", self.root_if,
           "nud", "permanent")  # fmt: skip
        self._ns("neigh", "replace", self.ghost, "lladdr", GHOST_MAC, "dev", self.host_if,
                 "nud", "permanent")  # fmt: skip
        for service in self.network.services.values():
            self.add_route(service)

    def _host_addresses(self) -> list[str]:
        return [self.address, *(self.source_for(s) for s in self.network.services.values())]

    def _neighbours(self, *, cut: bool) -> None:
        """Static neighbour entries both ways; a cut one names the ghost MAC."""
        host_mac = GHOST_MAC if cut else self.host_mac
        root_mac = GHOST_MAC if cut else self.root_mac
        for address in self._host_addresses():
            ip("neigh", "replace", address, "lladdr", host_mac, "dev", self.root_if,
               "nud", "permanent")  # fmt: skip
        self._ns("neigh", "replace", self.root_address, "lladdr", root_mac, "dev", self.host_if,
                 "nud", "permanent")  # fmt: skip

    def add_route(self, service: Service) -> None:
        source = self.source_for(service)
        self._ns("addr", "add", f"{source}/32", "dev", self.host_if)
        ip("neigh", "replace", source, "lladdr", GHOST_MAC if self.whole_cut else self.host_mac,
           "dev", self.root_if, "nud", "permanent")  # fmt: skip
        self._route(service, cut=False)

    def _route(self, service: Service, *, cut: bool) -> None:
        via = self.ghost if cut else self.root_address
        source = self.source_for(service)
        self._ns("route", "replace", f"{service.address}/32", "via", via, "dev", self.host_if,
                 "src", source)  # fmt: skip
        if cut:
            ip("route", "replace", f"{source}/32", "via", self.ghost, "dev", self.root_if)
        else:
            ip("route", "del", f"{source}/32", "dev", self.root_if, check=False)

    def blackhole(self, service: str | None = None) -> None:
        """Drop every packet between this host and `service` (None: every service), both ways."""
        if service is None:
            self._neighbours(cut=True)
            self.whole_cut = True
            return
        self._route(self.network.services[service], cut=True)
        self.cut.add(service)

    def heal(self, service: str | None = None) -> None:
        """Undo `blackhole(service)`; None heals everything."""
        names = [service] if service else sorted(self.cut)
        for name in names:
            self._route(self.network.services[name], cut=False)
            self.cut.discard(name)
        if service is None and self.whole_cut:
            self._neighbours(cut=False)
            self.whole_cut = False

    def remove(self) -> None:
        ip("netns", "del", self.netns, check=False)  # its veth end goes, and the pair with it
        ip("link", "del", self.root_if, check=False)


@dataclass
class Network:
    """The service addresses and hosts of one test; `close()` removes them all."""

    pid: int = field(default_factory=os.getpid)
    services: dict[str, Service] = field(default_factory=dict)
    hosts: list[Host] = field(default_factory=list)
    bridge: str = ""

    def __post_init__(self) -> None:
        self.bridge = f"{LINK_PREFIX}{self.pid}-s"

    def service(self, name: str) -> str:
        """The address of service `name` (made on first use); every host can reach it."""
        if name in self.services:
            return self.services[name].address
        if len(self.services) >= MAX_SERVICES:
            raise RuntimeError(f"at most {MAX_SERVICES} services per network")
        with _allocation_lock():
            if self.bridge not in _link_names():
                ip("link", "add", self.bridge, "type", "bridge")
                ip("link", "set", self.bridge, "up")
            used = _addresses_in_use()
            last = next(
                k for k in range(1, 255) if ipaddress.IPv4Address(f"{BASE}.0.{k}") not in used
            )
            address = f"{BASE}.0.{last}"
            ip("addr", "add", f"{address}/32", "dev", self.bridge)
        service = self.services[name] = Service(name, len(self.services) + 1, address)
        for host in self.hosts:
            host.add_route(service)
        return address

    def host(self) -> Host:
        """A new namespace joined to the root namespace; it reaches every service."""
        with _allocation_lock():
            used = {a.packed[2] for a in _addresses_in_use()}
            subnet = next(n for n in range(1, 255) if n not in used)
            serial = next(_serials)
            host = Host(
                network=self,
                netns=f"{NETNS_PREFIX}{self.pid}-{serial}",
                root_if=f"{LINK_PREFIX}{self.pid}-{serial}r",
                host_if=f"{LINK_PREFIX}{self.pid}-{serial}h",
                subnet=subnet,
            )
            ip("netns", "add", host.netns)
            self.hosts.append(host)
            host._up()
        return host

    def close(self) -> None:
        for host in self.hosts:
            host.remove()
        ip("link", "del", self.bridge, check=False)
        self.hosts.clear()
        self.services.clear()


_swept = False


@contextlib.contextmanager
def private_network() -> Iterator[Network]:
    """A Network removed at the end whatever happens; the first one sweeps crashed runs."""
    global _swept
    if not _swept:
        sweep_leftovers()
        _swept = True
    network = Network()
    try:
        yield network
    finally:
        network.close()
