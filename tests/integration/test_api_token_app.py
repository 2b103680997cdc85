"""A project without `rest_framework.authtoken`: sessions only, said clearly (jobs.W002), and
`manage.py jobs_token` stops with an error that names the app instead of an AttributeError."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User

from jobs import checks
from jobs.api.base import TOKEN_APP
from tests import harness

pytestmark = pytest.mark.django_db
SETTINGS = "tests.integration.settings_without_authtoken"
TOKEN_AUTHENTICATION = "rest_framework.authentication.TokenAuthentication"


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    """manage.py in a process whose settings lack the token app, on the test database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(DJANGO_SETTINGS_MODULE=SETTINGS, DATABASE_URL=harness.test_database_url())
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=harness.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_jobs_token_without_the_token_app__command_error_naming_it() -> None:
    run = manage("jobs_token", "dora", "--tenant", "labs")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "CommandError: API tokens need 'rest_framework.authtoken' in INSTALLED_APPS" in (
        run.stderr
    ), run.stderr
    assert "Traceback" not in run.stderr and "AttributeError" not in run.stderr, run.stderr
    assert not run.stdout.strip()
    assert not User.objects.filter(username="dora").exists()


def test_check_without_the_token_app__warns_jobs_w002() -> None:
    run = manage("check")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "(jobs.W002)" in run.stderr and "session logins only" in run.stderr, run.stderr


def test_token_app_check__only_for_a_project_on_tokens_mounting_the_api(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.REST_FRAMEWORK = {"DEFAULT_AUTHENTICATION_CLASSES": [TOKEN_AUTHENTICATION]}
    assert checks.jobs_api_token_app() == []  # the suite installs the app
    real = apps.is_installed  # the registry jobs.checks asks
    monkeypatch.setattr(apps, "is_installed", lambda name: name != TOKEN_APP and real(name))
    (warning,) = checks.jobs_api_token_app()
    assert warning.id == "jobs.W002" and TOKEN_APP in warning.msg
    # Sessions alone (DRF's defaults, as in a fresh project) need no token app.
    settings.REST_FRAMEWORK = {}
    assert checks.jobs_api_token_app() == []
    settings.REST_FRAMEWORK = {"DEFAULT_AUTHENTICATION_CLASSES": [TOKEN_AUTHENTICATION]}
    settings.ROOT_URLCONF = "django.contrib.auth.urls"  # a project that does not mount the API
    assert checks.jobs_api_token_app() == []
