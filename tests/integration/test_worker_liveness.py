"""Which workers are live (jobs.ops.workers): a stopped worker is gone at once, a killed one
after two heartbeat intervals without a write; `make demo` warns only about live ones."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rich.console import Console

from demo.guided.drills import Demo
from jobs.models import WorkerHeartbeat
from jobs.ops.workers import workers_live
from tests.harness import Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def demo_warning(workdir: Path) -> str:
    """What `make demo` says at start about other workers on its database."""
    out = io.StringIO()
    demo = Demo(console=Console(file=out, width=300), broker_url=None, timeout=5.0, workdir=workdir)
    demo.warn_if_shared()
    return out.getvalue()


def test_worker_is_gone_at_once__stopped_cleanly(harness: Harness, tmp_path: Path) -> None:
    worker = harness.start_worker("liveness-w1", JOBS_WORKER_HEARTBEAT_INTERVAL="1")
    wait_until(
        lambda: WorkerHeartbeat.objects.filter(name="liveness-w1").exists(),
        what="the worker's first heartbeat",
    )
    assert "liveness-w1" in demo_warning(tmp_path)

    worker.stop(timeout=30)  # SIGTERM: a warm shutdown, as honcho's on Ctrl-C
    assert worker.popen.returncode == 0, worker.log()[-2000:]

    assert not WorkerHeartbeat.objects.filter(name="liveness-w1").exists()
    assert "liveness-w1" not in demo_warning(tmp_path)


@pytest.mark.parametrize("interval", [1.0, 15.0])
def test_worker_is_gone__no_heartbeat_for_two_intervals(
    interval: float, settings: Any, tmp_path: Path
) -> None:
    settings.JOBS_WORKER_HEARTBEAT_INTERVAL = interval
    now = timezone.now()
    for name, silent_for in (("late@host", 1.5 * interval), ("killed@host", 2 * interval + 1)):
        WorkerHeartbeat.objects.create(
            name=name,
            hostname="host",
            pid=1,
            started_at=now - timedelta(hours=1),
            seen_at=now - timedelta(seconds=silent_for),
        )

    assert [w.name for w in workers_live()] == ["late@host"]
    warning = demo_warning(tmp_path)
    assert "late@host" in warning and "killed@host" not in warning
