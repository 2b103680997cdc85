"""DJANGO_ENV=production: `check --deploy` is clean, no default secret gets in, and static
files collected for development are refused (by the check and by the web server).

Each case starts a real process (manage.py, Flower) with the environment compose.yaml and the
Dockerfile give it, so the refusal is what an operator would see at start-up.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from jobsite.deploy import DEV_FLOWER_BASIC_AUTH, DEV_SECRET_KEY
from tests.harness import ROOT, Harness, free_port, wait_until
from tests.production_server import (
    dockerfile_cmd,
    production_env,
    production_server,
)

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


@pytest.fixture(scope="module")
def development_static(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """STATIC_ROOT collected as `make setup` collects without DJANGO_ENV: no manifest."""
    root = tmp_path_factory.mktemp("static-development")
    done = _manage("collectstatic", "--noinput", "-v", "0", DJANGO_STATIC_ROOT=str(root))
    assert done.returncode == 0, done.stderr
    assert (root / "admin" / "css" / "base.css").exists()
    return root


def test_check_deploy_reports_nothing__production_settings(production_static: Path) -> None:
    done = _manage(
        "check",
        "--deploy",
        DJANGO_ENV="production",
        DJANGO_SECRET_KEY=STRONG_KEY,
        DJANGO_STATIC_ROOT=str(production_static),
    )
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_check_deploy_names_the_fix__static_files_collected_for_development(
    development_static: Path,
) -> None:
    done = _manage(
        "check",
        "--deploy",
        DJANGO_ENV="production",
        DJANGO_SECRET_KEY=STRONG_KEY,
        DJANGO_STATIC_ROOT=str(development_static),
    )
    assert done.returncode != 0, done.stdout
    assert "jobsite.E001" in done.stderr, done.stderr[-2000:]
    assert str(development_static / "staticfiles.json") in done.stderr
    assert "DJANGO_ENV=production python manage.py collectstatic" in done.stderr


def test_check_deploy_names_a_missing_file__manifest_older_than_the_apps(
    production_static: Path, tmp_path: Path
) -> None:
    root = tmp_path / "static"
    shutil.copytree(production_static, root)
    manifest = json.loads((root / "staticfiles.json").read_text())
    del manifest["paths"]["admin/css/base.css"]  # as if an upgrade brought the file
    (root / "staticfiles.json").write_text(json.dumps(manifest))

    done = _manage(
        "check",
        "--deploy",
        DJANGO_ENV="production",
        DJANGO_SECRET_KEY=STRONG_KEY,
        DJANGO_STATIC_ROOT=str(root),
    )
    assert done.returncode != 0, done.stdout
    assert "jobsite.E002" in done.stderr and "admin/css/base.css" in done.stderr, done.stderr


@pytest.mark.django_db(transaction=True)
def test_web_server_refuses_to_start__static_files_collected_for_development(
    harness: Harness, development_static: Path
) -> None:
    argv = dockerfile_cmd()
    argv[argv.index("--bind") + 1] = f"127.0.0.1:{free_port()}"
    argv[0] = str(Path(sys.executable).with_name(argv[0]))
    env = production_env(harness.base_env(), development_static)
    web = harness.spawn("web-uncollected", argv, env)
    wait_until(lambda: not web.alive(), timeout=60, what="the web server to refuse")
    assert web.popen.returncode != 0
    assert "jobsite.E001" in web.log() and "collectstatic" in web.log(), web.log()[-3000:]


@pytest.mark.django_db(transaction=True)
def test_admin_answers_200__production_collect_then_production_server(
    harness: Harness, production_static: Path, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    with production_server(harness, production_static) as server:
        status, _, body = server.get("/admin/login/")
        assert status == 200, body[-2000:]
        (stylesheet,) = re.findall(rb'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', body)
        status, headers, _ = server.get(stylesheet.decode())
        assert status == 200 and headers["content-type"].startswith("text/css")


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
    child_env = harness.base_env(**env)
    # A production process refuses the drill kinds (demo/apps.py); Flower needs no kinds.
    child_env["JOBS_HANDLER_MODULES"] = ""
    return harness.spawn("flower", argv, child_env).popen


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
