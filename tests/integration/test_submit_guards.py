"""Database guards no code path can skip: legal edges, monotonic generation, append-only events."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

import jobs
from jobs.models import Job, JobEvent
from jobs.runtime import Outcome, execute

pytestmark = pytest.mark.django_db(transaction=True)


def raw_update(sql: str, params: list[Any]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def succeeded_job(user: Any) -> Job:
    job = jobs.submit(kind="noop", input={}, owner=user)
    assert execute(job.pk, worker="guard-test").outcome is Outcome.SUCCEEDED
    return Job.objects.get(pk=job.pk)


def test_trigger__succeeded_back_to_queued__is_refused(user: Any) -> None:
    job = succeeded_job(user)

    with pytest.raises(DatabaseError, match="jobs_job_transition_guard"):
        raw_update(
            "UPDATE jobs_job SET state = 'queued', finished_at = NULL, next_attempt_at = now() "
            "WHERE id = %s",
            [job.pk],
        )
    assert Job.objects.get(pk=job.pk).state == "succeeded"


def test_trigger__queued_straight_to_succeeded__is_refused(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)

    with pytest.raises(DatabaseError, match="jobs_job_transition_guard"):
        raw_update(
            "UPDATE jobs_job SET state = 'succeeded', result = '{}'::jsonb, finished_at = now() "
            "WHERE id = %s",
            [job.pk],
        )
    assert Job.objects.get(pk=job.pk).state == "queued"


def test_trigger__generation_decrease__is_refused(user: Any) -> None:
    job = succeeded_job(user)
    assert job.generation == 1

    with pytest.raises(DatabaseError, match="jobs_job_generation_monotonic"):
        raw_update("UPDATE jobs_job SET generation = 0 WHERE id = %s", [job.pk])
    assert Job.objects.get(pk=job.pk).generation == 1


def test_trigger__jobevent_update__is_refused(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    event = JobEvent.objects.get(job=job)

    with pytest.raises(DatabaseError, match="jobs_jobevent_append_only"):
        raw_update("UPDATE jobs_jobevent SET reason = 'rewritten' WHERE id = %s", [event.pk])
    assert JobEvent.objects.get(pk=event.pk).reason == "accepted"


def test_trigger__legal_transition__is_allowed(user: Any) -> None:
    job = succeeded_job(user)

    trail = list(
        JobEvent.objects.filter(job=job).order_by("at", "id").values_list("from_state", "to_state")
    )
    assert trail == [("", "queued"), ("queued", "leased"), ("leased", "succeeded")]


def test_submit_with_an_unsaved_tenant__refused_before_anything_is_written(user: Any) -> None:
    from jobs.models import Tenant

    with pytest.raises(ValueError, match="unsaved related object 'tenant'"):
        jobs.submit(kind="noop", input={}, owner=user, tenant=Tenant(name="never-saved"))
    assert not Job.objects.exists()  # not a personal job with tenant NULL
