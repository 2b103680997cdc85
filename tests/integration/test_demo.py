"""`manage.py jobs_demo` for real: its own redis, workers, relay and provider, killed and paused."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from demo.guided import process_alive
from jobs.models import Job
from tests import harness
from tests.harness import ROOT, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

ACCOUNTING = re.compile(
    r"accounting: accepted=(?P<accepted>\d+) succeeded=(?P<succeeded>\d+) "
    r"quarantined=(?P<quarantined>\d+) attempts=(?P<attempts>\d+) "
    r"duplicate_deliveries=(?P<duplicate_deliveries>\d+) "
    r"duplicate_effects=(?P<duplicate_effects>\d+)"
)


def demo_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        {
            "DATABASE_URL": harness.test_database_url(),
            "DJANGO_SETTINGS_MODULE": "jobsite.settings",
            "JOBS_MEDIA_ROOT": str(tmp_path / "media"),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def started_pids(output: str) -> set[int]:
    """Every pid the demo said it started (servers, workers and their pool children)."""
    pids = {int(p) for p in re.findall(r"\bpid (\d+)", output)}
    for group in re.findall(r"pool child \[([\d, ]*)\]", output):
        pids |= {int(p) for p in group.replace(",", " ").split()}
    return pids


@pytest.mark.timeout(420)
def test_demo_passes_every_drill__real_processes(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "jobs_demo"],
        cwd=ROOT,
        env=demo_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=400,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    match = ACCOUNTING.search(done.stdout)
    assert match, done.stdout[-3000:]
    counts = {name: int(value) for name, value in match.groupdict().items()}
    assert counts["accepted"] == 4
    assert counts["succeeded"] == 3
    assert counts["quarantined"] == 1
    assert counts["duplicate_effects"] == 0
    assert "all drill expectations held" in done.stdout
    assert "✘" not in done.stdout
    # The database the demo wrote to is the truth the accounting came from.
    demo_jobs = Job.objects.filter(owner__username="demo")
    assert demo_jobs.count() == 4
    assert demo_jobs.filter(state="succeeded").count() == 3
    # Every process it started is gone.
    pids = started_pids(output)
    assert len(pids) >= 7, output[:3000]
    assert not [pid for pid in pids if process_alive(pid)]


@pytest.mark.timeout(300)
def test_demo_stops_everything_it_started__interrupted(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "jobs_demo"],
        cwd=ROOT,
        env=demo_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    assert demo.stdout is not None
    for line in demo.stdout:
        lines.append(line)
        if "workers up: demo-b" in line:  # mid-drill: redis, relay, provider, 2 workers
            break
    demo.send_signal(signal.SIGINT)
    rest, _ = demo.communicate(timeout=120)
    output = "".join(lines) + rest
    assert demo.returncode == 130, output[-4000:]
    assert "every process the demo started was stopped" in output
    pids = started_pids(output)
    assert len(pids) >= 5, output
    wait_until(
        lambda: not [pid for pid in pids if process_alive(pid)],
        timeout=30,
        what="every demo child to be gone",
    )
