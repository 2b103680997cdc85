from __future__ import annotations

from typing import Any

import pytest

import jobs
from jobs.models import Job
from tests.harness import Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_submitted_job_runs_on_a_real_worker__fast_path(harness: Harness, user: Any) -> None:
    harness.start_worker("w1")
    job = jobs.submit(kind="noop", input={}, owner=user)
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=30, what="job to succeed"
    )
    done = Job.objects.get(pk=job.pk)
    assert done.generation == 1
    assert done.result == {"ok": True}
