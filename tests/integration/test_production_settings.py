"""DJANGO_ENV=production: `check --deploy` is clean, and no default secret gets in.

Each case starts a real process (manage.py, Flower) with the environment compose.yaml and the
Dockerfile give it, so the refusal is what an operator would see at start-up.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from jobsite.deploy import DEV_FLOWER_BASIC_AUTH, DEV_SECRET_KEY
from tests.harness import ROOT, Harness, free_port, wait_until

STRONG_KEY = secrets.token_urlsafe(50)


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """manage.py with only `env` set among DJANGO_* (this process dropped its own)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "jobsite.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_reports_nothing__production_settings() -> None:
    done = _manage("check", "--deploy", DJANGO_ENV="production", DJANGO_SECRET_KEY=STRONG_KEY)
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_development_needs_no_environment__check_runs() -> None:
    done = _manage("check")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "needs DJANGO_SECRET_KEY"),
        ({"DJANGO_SECRET_KEY": DEV_SECRET_KEY}, "placeholder or too weak"),
        ({"DJANGO_SECRET_KEY": "change-me"}, "placeholder or too weak"),
        ({"DJANGO_SECRET_KEY": "x" * 60}, "placeholder or too weak"),
        ({"DJANGO_SECRET_KEY": "django-insecure-" + STRONG_KEY}, "placeholder or too weak"),
        ({"DJANGO_SECRET_KEY": STRONG_KEY[:40]}, "placeholder or too weak"),
        ({"DJANGO_SECRET_KEY": STRONG_KEY, "DJANGO_DEBUG": "1"}, "DJANGO_DEBUG is on"),
    ],
)
def test_start_up_refused__default_or_weak_secret_in_production(
    env: dict[str, str], says: str
) -> None:
    done = _manage("check", DJANGO_ENV="production", **env)
    assert done.returncode != 0
    assert says in done.stderr, done.stderr[-2000:]


def test_unknown_environment_refused() -> None:
    done = _manage("check", DJANGO_ENV="prod")
    assert done.returncode != 0 and "DJANGO_ENV='prod'" in done.stderr


# -- Flower ------------------------------------------------------------------------------------


def _flower(harness: Harness, port: int, **env: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "jobsite",
        "flower",
        "--conf=jobsite/flowerconfig.py",
        "--address=127.0.0.1",
        f"--port={port}",
    ]
    return harness.spawn("flower", argv, harness.base_env(**env)).popen


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "basic_auth", [None, DEV_FLOWER_BASIC_AUTH, "admin:change-me", "ops:short"]
)
def test_flower_refuses_to_start__missing_or_default_password_in_production(
    harness: Harness, basic_auth: str | None
) -> None:
    env = {"DJANGO_ENV": "production", "DJANGO_SECRET_KEY": STRONG_KEY}
    if basic_auth is not None:
        env["FLOWER_BASIC_AUTH"] = basic_auth
    popen = _flower(harness, free_port(), **env)
    assert popen.wait(timeout=60) == 78
    log = harness.procs[-1].log()
    assert "FLOWER_BASIC_AUTH" in log and "DJANGO_ENV=production" in log, log[-2000:]


@pytest.mark.django_db(transaction=True)
def test_flower_asks_for_its_password__strong_one_in_production(harness: Harness) -> None:
    port = free_port()
    credentials = f"ops:{secrets.token_urlsafe(16)}"
    popen = _flower(
        harness,
        port,
        DJANGO_ENV="production",
        DJANGO_SECRET_KEY=STRONG_KEY,
        FLOWER_BASIC_AUTH=credentials,
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: _status(f"{base}/healthcheck") == 200 or popen.poll() is not None,
        timeout=60,
        what="Flower to answer",
    )
    assert popen.poll() is None, harness.procs[-1].log()[-2000:]
    assert _status(f"{base}/") == 401
    token = base64.b64encode(credentials.encode()).decode()
    assert _status(f"{base}/", {"Authorization": f"Basic {token}"}) == 200


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers or {}), timeout=5
        ) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0
