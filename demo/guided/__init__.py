"""The guided demo (`manage.py jobs_demo`): the seed drills, on real worker processes.

It starts everything it needs as child processes it alone owns (a private redis-server, two
or three celery workers, the outbox relay, the notification provider), runs four drills,
narrates them, checks what each drill promises, prints the accounting and stops every child
by pid, also on Ctrl-C. The reaper runs inside the demo process (direct `jobs_reap` calls
while it waits). Demo kinds with 3 s leases live in demo.demo_kinds.

Modules: `processes` (children, stop by pid), `drills` (the four drills and their checks),
`report` (checks, accounting, what to look at next).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console

from .drills import Demo
from .processes import DemoFailed, process_alive
from .report import WHERE_NEXT, Accounting, Check, DemoReport, accounting_table

__all__ = [
    "WHERE_NEXT",
    "Accounting",
    "Check",
    "DemoFailed",
    "DemoReport",
    "accounting_table",
    "demo_run",
    "process_alive",
]


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM runs the same clean-up as Ctrl-C."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def demo_run(
    *,
    console: Console,
    broker_url: str | None = None,
    timeout: float = 60.0,
    keep_logs: bool = False,
) -> DemoReport:
    """Run every drill; children are stopped before this returns or raises."""
    workdir = Path(tempfile.mkdtemp(prefix="jobs-demo-"))
    # The demo narrates the reaper itself; its INFO log line would only repeat it.
    logging.getLogger("jobs.reaper").setLevel(logging.WARNING)
    demo = Demo(console=console, broker_url=broker_url, timeout=timeout, workdir=workdir)
    failed = True
    try:
        with sigterm_as_interrupt():
            report = demo.run()
        failed = bool(report.failed)
        return report
    finally:
        if failed or keep_logs:
            console.print(f"process logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
