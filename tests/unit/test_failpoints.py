"""Failpoints: strict parsing, the three actions, and nothing at all when unset."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import jobs.failpoints  # noqa: F401  (declares the worker's names)
from outbox import failpoints
from outbox.failpoints import FailpointTriggered, configure, failpoint, parse


@pytest.fixture(autouse=True)
def _reset_failpoints() -> Iterator[None]:
    yield
    configure("")


def test_parse__reads_names_and_actions() -> None:
    spec = "worker.after_claim=exit, relay.after_publish_before_mark=sleep:0.5,"

    assert parse(spec) == {
        "worker.after_claim": "exit",
        "relay.after_publish_before_mark": "sleep:0.5",
    }


def test_parse__unknown_name__raises_with_the_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown failpoint 'worker\.typo'"):
        parse("worker.typo=exit")


def test_parse__unknown_action__raises() -> None:
    with pytest.raises(ValueError, match="unknown action 'explode'"):
        parse("worker.after_claim=explode")


def test_parse__missing_action__raises() -> None:
    with pytest.raises(ValueError):
        parse("worker.after_claim")


def test_failpoint_unset__does_nothing() -> None:
    configure("")

    failpoint("worker.after_claim")
    assert failpoints._active == {}


def test_failpoint_raise__raises_only_at_its_name() -> None:
    configure("worker.after_claim=raise")

    failpoint("worker.after_effect_before_complete")
    with pytest.raises(FailpointTriggered, match=r"worker\.after_claim"):
        failpoint("worker.after_claim")


def test_failpoint_sleep__sleeps() -> None:
    configure("worker.after_claim=sleep:0.2")

    started = time.monotonic()
    failpoint("worker.after_claim")
    assert time.monotonic() - started >= 0.2


def test_failpoint_exit__kills_the_process_with_137() -> None:
    code = (
        "from outbox.failpoints import configure, failpoint\n"
        "configure('submit.after_commit_before_publish=exit')\n"
        "failpoint('submit.after_commit_before_publish')\n"
        "print('survived')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    assert done.returncode == 137
    assert "survived" not in done.stdout


def test_failpoints_from_environment__are_read_at_import() -> None:
    code = "from outbox import failpoints; print(sorted(failpoints._active.items()))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"JOBS_FAILPOINTS": "worker.after_claim=raise", "PATH": "/usr/bin:/bin"},
        check=True,
    )

    assert done.stdout.strip() == "[('worker.after_claim', 'raise')]"


def _run(code: str, spec: str) -> subprocess.CompletedProcess[str]:
    env = {"JOBS_FAILPOINTS": spec, "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )


def test_outbox_alone__declares_only_its_own_names() -> None:
    code = (
        "from outbox import failpoints\n"
        "print(sorted(failpoints.NAMES))\n"
        "failpoints.parse('worker.after_claim=exit')\n"
    )
    done = _run(code, "")

    assert done.stdout.strip() == str(
        [
            "relay.after_publish_before_mark",
            "relay.after_reserve",
            "submit.after_commit_before_publish",
            "submit.publisher_before_publish",
        ]
    )
    assert "unknown failpoint 'worker.after_claim'" in done.stderr


def test_failpoint_from_environment__a_worker_name_fires_once_jobs_declared_it() -> None:
    code = (
        "import jobs.failpoints\n"
        "from outbox.failpoints import FailpointTriggered, failpoint\n"
        "failpoint('relay.after_publish_before_mark')\n"
        "try:\n"
        "    failpoint('worker.after_claim')\n"
        "except FailpointTriggered as exc:\n"
        "    print('triggered', exc)\n"
    )
    done = _run(code, "worker.after_claim=raise")

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "triggered worker.after_claim"


def test_failpoint_from_environment__a_name_no_app_declared__stops_the_first_failpoint() -> None:
    code = (
        "import jobs.failpoints\n"
        "from outbox.failpoints import failpoint\n"
        "failpoint('relay.after_publish_before_mark')\n"
        "print('survived')\n"
    )
    done = _run(code, "worker.after_claim=raise,worker.typo=exit")

    assert done.returncode == 1
    assert "survived" not in done.stdout
    assert "ValueError: JOBS_FAILPOINTS: unknown failpoint 'worker.typo'" in done.stderr
