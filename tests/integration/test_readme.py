"""Every command in README.md runs here, so the README cannot rot.

`sh` blocks run for real in one bash session (manage.py against the test database, curl against
a live server with a real worker and provider behind it); `sh make-target` blocks are checked
against the Makefile with `make -n`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from jobs.models import EffectLedgerEntry, Job
from tests.harness import ROOT, Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

README = ROOT / "README.md"
TOUR_ADDRESS = "127.0.0.1:8000"
# Where `make run` says its instance is; the tour reads the test's own copy, never the
# checkout's (a developer's `make run` may have written it).
RUN_ENV = "var/run.env"
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
# What `make -n TARGET` must show: the command the target exists for.
MAKE_TARGETS = {
    "run": "honcho start -f Procfile",
    "test": "pytest",
    "demo": "manage.py jobs_demo",
}


@dataclass(frozen=True)
class Block:
    language: str
    tags: tuple[str, ...]
    body: str


def readme_blocks() -> list[Block]:
    blocks = []
    for match in FENCE.finditer(README.read_text()):
        words = match.group("info").split()
        language = words[0] if words else ""
        blocks.append(Block(language, tuple(words[1:]), match.group("body")))
    return blocks


def shell_blocks(*, make_target: bool) -> list[Block]:
    return [
        b
        for b in readme_blocks()
        if b.language == "sh" and ("make-target" in b.tags) == make_target
    ]


def test_every_block_has_a_known_kind__readme() -> None:
    blocks = readme_blocks()
    assert blocks, "README.md has no fenced blocks"
    for block in blocks:
        assert block.language in {"sh", "text", "python"}, f"untested block kind: {block}"
        assert set(block.tags) <= {"make-target"}, f"unknown tag: {block}"
    # Other shells would escape the test: every command block is `sh`.
    assert not [b for b in blocks if b.language in {"bash", "shell", "console", "zsh"}]


def test_relative_links_resolve__readme_and_handlers_doc() -> None:
    for doc in (README, ROOT / "docs" / "handlers.md"):
        targets = re.findall(r"\]\((?!https?://|#)([^)\s]+)\)", doc.read_text())
        assert targets, doc
        missing = [t for t in targets if not (doc.parent / t.split("#")[0]).exists()]
        assert not missing, f"{doc.name} links to missing files: {missing}"


def make_dry_run(target: str) -> str:
    done = subprocess.run(
        ["make", "-n", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3")},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_long_running_commands_are_make_targets__make_dry_run() -> None:
    blocks = shell_blocks(make_target=True)
    commands = [line.strip() for b in blocks for line in b.body.splitlines() if line.strip()]
    assert commands, "README shows no make targets"
    assert {"make run", "make test"} <= set(commands)
    makefile = (ROOT / "Makefile").read_text()
    for command in commands:
        words = command.split()
        assert len(words) == 2 and words[0] == "make", f"not a plain make target: {command}"
        target = words[1]
        assert re.search(rf"^{re.escape(target)}:", makefile, re.MULTILINE), target
        assert MAKE_TARGETS[target] in make_dry_run(target), target


def tour_script(run_env: Path) -> str:
    """The README's `sh` blocks in order, each announced by a marker line, reading `run_env`
    where they say var/run.env."""
    parts = ["set -euo pipefail"]
    for index, block in enumerate(shell_blocks(make_target=False)):
        # A newline first: curl's JSON output has none of its own.
        parts.append(f"printf '\\n::block {index}::\\n'")
        parts.append(block.body.replace(RUN_ENV, shlex.quote(str(run_env))))
    return "\n".join(parts) + "\n"


def split_output(stdout: str) -> dict[int, str]:
    pieces = re.split(r"^::block (\d+)::$", stdout, flags=re.MULTILINE)
    return {int(pieces[i]): pieces[i + 1] for i in range(1, len(pieces) - 1, 2)}


def run_tour(env: dict[str, str], run_env: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", tour_script(run_env)],
        cwd=ROOT,
        env={**env, "DJANGO_ENV_FILE": str(run_env)},  # manage.py reads the same copy
        capture_output=True,
        text=True,
        timeout=240,
    )


def write_run_env(path: Path, **instance: str) -> None:
    """The file as `make run` writes it (the Makefile's command), from `instance`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    subprocess.run(
        [sys.executable, "-m", "jobsite.runenv", str(path)],
        cwd=ROOT,
        env={**env, **instance, "PYTHONPATH": str(ROOT)},
        check=True,
        timeout=60,
    )


# The instance the tour must find; the rest of the environment is the test's.
INSTANCE = ("DATABASE_URL", "CELERY_BROKER_URL", "NOTIFY_PROVIDER_URL")


def test_tour_reads_the_instance_from_run_env__no_fixed_address() -> None:
    bodies = [b.body for b in shell_blocks(make_target=False)]
    assert TOUR_ADDRESS not in "".join(bodies)
    assert RUN_ENV in bodies[0] and "$WEB_URL" in bodies[0]
    assert f"jobsite.runenv {RUN_ENV}" in make_dry_run("run")


def curl_json(url: str, token: str) -> Any:
    done = subprocess.run(
        ["curl", "-s", url, "-H", f"Authorization: Token {token}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "named_by",
    [
        # What the environment sets wins over the file (its database is one that is gone).
        "environment",
        # A moved instance (another port, the test database) that only the file names.
        "run_env_only",
    ],
)
def test_tour_commands_run_for_real__live_server_and_worker(
    harness: Harness, live_server: Any, tmp_path: Path, named_by: str
) -> None:
    harness.start_provider()
    harness.start_relay()
    harness.start_worker("readme-w1")
    blocks = shell_blocks(make_target=False)
    assert len(blocks) >= 6, "the tour lost its commands"
    run_env = tmp_path / "run.env"
    env = harness.base_env()
    database_url = harness.database_url
    if named_by == "environment":
        database_url += "_gone"
    else:
        env = {k: v for k, v in env.items() if k not in INSTANCE}
    write_run_env(
        run_env,
        DATABASE_URL=database_url,
        CELERY_BROKER_URL=harness.broker_url,
        WEB_PORT=str(urlsplit(live_server.url).port),
        PROVIDER_PORT=str(harness.provider_port),
    )
    done = run_tour(env, run_env)
    assert done.returncode == 0, f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    out = split_output(done.stdout)
    assert len(out) == len(blocks)
    by_text = {index: block.body for index, block in enumerate(blocks)}

    def output_of(fragment: str) -> str:
        (index,) = [i for i, body in by_text.items() if fragment in body]
        return out[index]

    assert json.loads(output_of("/healthz"))
    accepted = output_of("curl -s -i -X POST")
    assert re.search(r"^HTTP/1\.1 202", accepted, re.MULTILINE), accepted
    assert re.search(r"^Location: /api/jobs/[0-9a-f-]{36}/", accepted, re.MULTILINE | re.I)
    first_id = json.loads(accepted.split("\n\n", 1)[1])["id"]
    assert output_of("JOB=$(").strip() == f"job 84 is {first_id}"  # the replay: same job
    status = json.loads(output_of("?wait=10"))
    assert status["id"] == first_id and status["kind"] == "report.generate"
    result = json.loads(output_of("/result/"))
    assert result.get("status") == "succeeded" or result["error"]["code"] == "not_finished"
    assert "Superuser created" in output_of("createsuperuser")
    assert "Little's law" in output_of("jobs_simulate")
    assert "more retries do not add capacity" in output_of("jobs_simulate")
    assert Path("/tmp/capacity.png").read_bytes()[:4] == b"\x89PNG"

    # The one job of the tour, finished by the real worker: one artifact, one notice.
    assert Job.objects.filter(kind="report.generate").count() == 1
    wait_until(
        lambda: Job.objects.get(pk=first_id).state == "succeeded",
        timeout=90,
        what="job 84 to succeed on the worker",
    )
    token = harness.manage("jobs_token", "alice", "--tenant", "acme").stdout.strip()
    final = curl_json(f"{live_server.url}/api/jobs/{first_id}/result/", token)
    assert final["status"] == "succeeded"
    assert final["result"]["artifact"].endswith("/v1/report.md")
    entry = EffectLedgerEntry.objects.get(job_id=first_id, name="completion_notice")
    assert entry.calls == 1
    assert harness.provider_stats()["requests_by_key"] == {entry.idempotency_key: 1}
