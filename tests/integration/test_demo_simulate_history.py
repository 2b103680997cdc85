"""`jobs_simulate --from-history`: arrival rate, service time and retry rate from real rows."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import jobs
from demo.management.commands.jobs_simulate import job_history_calibration
from jobs.models import Job
from jobs.runtime import Outcome
from tests.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def run_until_finished(job: Job) -> None:
    """Deliver a job in-process until it succeeds (a retry is due after its jittered delay)."""

    def delivered() -> bool:
        due = Job.objects.get(pk=job.pk).next_attempt_at
        assert due is not None
        if due > timezone.now():
            return False
        return jobs.execute(job.pk).outcome is Outcome.SUCCEEDED

    wait_until(delivered, timeout=30, what=f"job {job.pk} to succeed")


def test_calibration_reads_rates_from_jobs_and_events__recent_history(user: Any) -> None:
    for _ in range(5):
        run_until_finished(jobs.submit(kind="noop", input={}, owner=user))
    flaky = jobs.submit(kind="drill.flaky", input={"fail_times": 1}, owner=user)
    run_until_finished(flaky)

    history = job_history_calibration(hours=1)
    assert history.accepted == 6
    assert history.arrival_rate == pytest.approx(6 / 3600)
    assert history.attempts == 7  # one retry
    assert history.retry_rate == pytest.approx(1 / 7)
    assert history.service_mean is not None and 0 < history.service_mean < 5

    out = StringIO()
    call_command("jobs_simulate", "--from-history=1", "--duration=600", "--step=300", stdout=out)
    assert "calibrated from the last 1h: 6 jobs" in out.getvalue()
    assert "retry rate 14.3%" in out.getvalue()


def test_readable_error__no_history() -> None:
    with pytest.raises(CommandError, match="no usable history"):
        call_command("jobs_simulate", "--from-history=1", stdout=StringIO())
