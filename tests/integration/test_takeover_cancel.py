"""A job whose owner died with a cancel request pending is cancelled, not run again."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import jobs
from jobs.claims import job_claim
from jobs.models import Job
from jobs.services import job_cancel

pytestmark = pytest.mark.django_db(transaction=True)


def test_takeover_of_expired_lease_with_cancel_request__cancelled_without_running(
    user: Any,
) -> None:
    job = jobs.submit(kind="drill.flaky", input={"fail_times": 0}, owner=user)
    assert job_claim(Job.objects.get(pk=job.pk), worker="dead", lease_seconds=30) is not None
    job_cancel(job_id=job.pk, actor="alice")
    past = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=job.pk).update(lease_until=past)  # the owner died
    report = jobs.execute(job.pk)
    job.refresh_from_db()
    assert report.outcome.value == "cancelled"
    assert (job.state, job.generation, job.result) == ("cancelled", 2, None)
    assert list(job.events.values_list("to_state", flat=True)) == [
        "queued",
        "leased",
        "leased",
        "leased",
        "cancelled",
    ]
