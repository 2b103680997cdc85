"""Real processes inside a host (a network namespace of tests/network/netns.py)."""

from __future__ import annotations

from tests.harness import Harness, Proc
from tests.network.netns import Host


class HostHarness(Harness):
    """A harness whose processes run inside `host`."""

    host: Host

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        return super().spawn(name, self.host.wrap(argv), env)
