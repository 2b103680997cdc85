"""Worker settings for tests/integration/test_django_tasks.py: the example project's, with
TASKS on the durable backend.

Workers run with DJANGO_SETTINGS_MODULE=tests.settings_tasks (the test process keeps
tests.settings and sets TASKS_FOR_TESTS with pytest-django's `settings`). Env
JOBS_TEST_TASKS (JSON) replaces TASKS: the README example test runs the README's own.
"""

from __future__ import annotations

import json
import os

from jobsite.settings import *  # noqa: F403

TASKS_FOR_TESTS = {
    "default": {
        "BACKEND": "jobs.tasks_backend.DurableJobsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "max_attempts": 3,
            "base_delay": 0.05,
            "max_delay": 0.2,
            "responsible": "tasks-team",
            "celery_queues": {"emails": "jobs-emails"},
        },
    }
}

TASKS = (
    json.loads(os.environ["JOBS_TEST_TASKS"])
    if "JOBS_TEST_TASKS" in os.environ
    else TASKS_FOR_TESTS
)
