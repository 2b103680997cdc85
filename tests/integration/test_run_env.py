"""var/run.env (jobsite/runenv.py): manage.py reads where `make run`'s instance is, never in
the test suite's own processes, and a file naming a database that is gone reads as one line
that says so, not a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from jobsite.runenv import TEST_SUITE_MARK, run_env_write
from tests.harness import ROOT

SHOW = (
    "import os; from django.conf import settings; "
    "print(settings.NOTIFY_PROVIDER_URL, settings.DATABASES['default']['NAME'], "
    "os.environ.get('WEB_URL'))"
)


def _manage(manage_py: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run(
        [sys.executable, str(manage_py), *args],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "jobsite.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """manage.py in a checkout of its own whose var/run.env a developer's `make run` wrote."""
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")
    run_env_write(
        tmp_path / "var" / "run.env",
        {
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/developers_own",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/7",
            "PROVIDER_PORT": "9999",
            "WEB_URL": "http://127.0.0.1:8001",
        },
    )
    return tmp_path / "manage.py"


def test_suite_processes_never_read_run_env__developers_file_beside_manage_py(
    checkout: Path,
) -> None:
    assert os.environ.get(TEST_SUITE_MARK)  # what every process the suite starts inherits
    suite_db = os.environ["DATABASE_URL"].rsplit("/", 1)[1]

    done = _manage(checkout, "shell", "-c", SHOW)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split() == [
        "http://127.0.0.1:8765/notify",
        suite_db,
        "None",
    ]


def test_manage_py_reads_run_env__variables_the_environment_lacks(checkout: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != TEST_SUITE_MARK}
    suite_db = env["DATABASE_URL"].rsplit("/", 1)[1]

    done = subprocess.run(
        [sys.executable, str(checkout), "shell", "-c", SHOW],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "jobsite.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    # The file fills what is missing; DATABASE_URL, set in the environment, wins.
    assert done.stdout.splitlines()[-1].split() == [
        "http://127.0.0.1:9999/notify",
        suite_db,
        "http://127.0.0.1:8001",
    ]


# Ids of their own: a parameter made at import (a random name) would differ between the
# two pytest-xdist workers, which then refuse to run anything.
@pytest.mark.parametrize(
    ("database_url", "says"),
    [
        pytest.param(
            f"postgres://postgres@127.0.0.1:5432/gone_{uuid.uuid4().hex[:8]}",
            "does not exist",
            id="database-gone",
        ),
        pytest.param(
            "postgres://postgres:secret@127.0.0.1:1/durable_jobs",
            "Connection refused",
            id="server-gone",
        ),
    ],
)
def test_manage_py_names_the_database_it_cannot_reach__stale_run_env(
    tmp_path: Path, database_url: str, says: str
) -> None:
    run_env = tmp_path / "run.env"
    run_env_write(run_env, {"DATABASE_URL": database_url, "WEB_URL": "http://127.0.0.1:8001"})
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}

    done = subprocess.run(
        [sys.executable, "manage.py", "jobs_token", "alice", "--tenant", "acme"],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "DJANGO_ENV_FILE": str(run_env)},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 2, done.stderr
    assert done.stderr.startswith("error: cannot use the database postgres://postgres")
    assert says in done.stderr and f"from {run_env}, written by `make run`" in done.stderr
    assert "secret" not in done.stderr
