"""Settings of the test suite: the example project's, on the suite's own servers.

The suite never follows the developer's environment: variables that name services or change
the library's behaviour (CELERY_*, DATABASE_URL, JOBS_*, OUTBOX_*, DJANGO_*, PG*, ...) are
removed from this process before the project's settings read them, so neither this process
nor the workers it starts publish to anyone else's broker or write to anyone else's database.
Celery reads CELERY_BROKER_URL from the environment before its own conf, which is why a
fixture alone could not redirect it. Knobs of the suite itself start with JOBS_TEST_.
"""

from __future__ import annotations

import os

FOREIGN_PREFIXES = (
    "CELERY_",
    "DATABASE_",
    "JOBS_",
    "OUTBOX_",
    "DJANGO_",
    "NOTIFY_PROVIDER_",
    "LOG_",
    "PG",
    "REDIS_",
)
KEPT = {"DJANGO_SETTINGS_MODULE"}
# Set once the suite's process has forgotten the developer's environment. Processes it starts
# inherit it (and tests.settings, through DJANGO_SETTINGS_MODULE): their environment was made
# by the suite, DATABASE_URL included, and is kept.
SCRUBBED = "JOBS_TEST_ENVIRONMENT_SCRUBBED"


def forget_foreign_environment() -> list[str]:
    """Remove the variables that could point the suite elsewhere; returns their names."""
    gone = [
        name
        for name in os.environ
        if name.startswith(FOREIGN_PREFIXES)
        and not name.startswith("JOBS_TEST_")
        and name not in KEPT
    ]
    for name in gone:
        del os.environ[name]
    return gone


if not os.environ.get(SCRUBBED):
    forget_foreign_environment()
    os.environ["DATABASE_URL"] = os.environ.get(
        "JOBS_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/durable_jobs"
    )
    os.environ[SCRUBBED] = "1"

from jobsite.settings import *  # noqa: E402,F403

# The suite submits the drill kinds (drill.crash, drill.malformed, ...), as `manage.py
# jobs_demo` does; jobsite.settings alone never registers them (demo.apps refuses them in
# production). Workers the suite starts read this module too.
JOBS_HANDLER_MODULES = [*globals().get("JOBS_HANDLER_MODULES", []), "demo.drill_kinds"]
