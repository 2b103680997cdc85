"""Real processes inside a host (a network namespace of tests/network/netns.py), and a client
process read line by line."""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import IO

from tests.harness import Harness, Proc, wait_until
from tests.network.netns import Host


class HostHarness(Harness):
    """A harness whose processes run inside `host`."""

    host: Host

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        return super().spawn(name, self.host.wrap(argv), env)


@dataclass
class Client:
    """A PG_CLIENT process; each line it prints is kept with the monotonic time it arrived."""

    popen: subprocess.Popen[str]
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, args=(self.popen.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line.strip()))

    def line(self, prefix: str | tuple[str, ...], *, timeout: float) -> tuple[float, str]:
        """The first line starting with `prefix` (and when it came), waiting up to `timeout`."""

        def found() -> tuple[float, str] | None:
            return next(((t, s) for t, s in self.lines if s.startswith(prefix)), None)

        what = f"a line {prefix!r} (the call is still blocked?): {self.lines}"
        return wait_until(found, timeout=timeout, what=what)

    def outcome(self, *, timeout: float) -> tuple[float, str, float]:
        """(arrival time, outcome, seconds the call took as the client measured it)."""
        at, text = self.line(("ok ", "failed:"), timeout=timeout)
        outcome, seconds = text.rsplit(" ", 1)
        return at, outcome, float(seconds)
