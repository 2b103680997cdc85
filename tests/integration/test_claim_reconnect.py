"""A worker whose database connection broke between tasks claims on a fresh one."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection

import jobs
from jobs.models import Job
from jobs.runtime import Outcome

pytestmark = pytest.mark.django_db(transaction=True)


def test_connection_killed_between_tasks__claim_retried_once_and_job_runs(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    assert row is not None
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"],
        dbname=settings["NAME"],
        autocommit=True,
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [row[0]])
    report = jobs.execute(job.pk)
    assert report.outcome is Outcome.SUCCEEDED
    assert Job.objects.get(pk=job.pk).state == "succeeded"
