"""jobs.W010: a host project's PostgreSQL connections without network timeouts are named."""

from __future__ import annotations

import subprocess
import sys

from django.conf import settings

from jobs.checks import database_timeouts_missing, jobs_database_timeouts
from tests.harness import ROOT

BOUNDED = {"connect_timeout": 5, "keepalives_idle": 5, "tcp_user_timeout": 10000}
PG = "django.db.backends.postgresql"


def test_database_timeouts__none_missing_when_all_set() -> None:
    assert database_timeouts_missing({"ENGINE": PG, "OPTIONS": BOUNDED}) == []


def test_database_timeouts__a_default_database_lacks_all_three() -> None:
    assert database_timeouts_missing({"ENGINE": PG, "OPTIONS": {}}) == [
        "connect_timeout",
        "keepalives_idle",
        "tcp_user_timeout",
    ]


def test_database_timeouts__zero_is_no_bound_and_keepalives_off_is_missing() -> None:
    options = {**BOUNDED, "connect_timeout": 0, "keepalives": 0}
    assert database_timeouts_missing({"ENGINE": PG, "OPTIONS": options}) == [
        "connect_timeout",
        "keepalives_idle",
    ]


def test_database_timeouts__other_engines_are_not_ours_to_judge() -> None:
    assert database_timeouts_missing({"ENGINE": "django.db.backends.sqlite3"}) == []


def test_example_project__bounds_every_postgresql_call() -> None:
    assert settings.DATABASES["default"]["OPTIONS"]["tcp_user_timeout"] == 10000
    assert jobs_database_timeouts() == []


def test_check__warns_a_project_whose_database_has_no_timeouts() -> None:
    """A host project as most start: a bare DATABASES entry (`manage.py check` says W010)."""
    script = (
        "import django; from django.conf import settings; "
        "settings.configure(INSTALLED_APPS=['django.contrib.contenttypes', "
        "'django.contrib.auth', 'outbox', 'jobs'], DATABASES={'default': {'ENGINE': "
        f"'{PG}', 'NAME': 'x'}}}}, CELERY_BROKER_URL='redis://127.0.0.1:1/0'); django.setup(); "
        "from jobs.checks import jobs_database_timeouts as c; "
        "[print(w.id, w.msg) for w in c()]"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("jobs.W010 "), out
    assert "connect_timeout, keepalives_idle, tcp_user_timeout" in out
    assert "lease expires without it knowing" in out
