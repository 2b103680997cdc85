"""Cancellation: waiting jobs stop at once; a running job is asked through its heartbeat."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import jobs
from jobs.claims import job_claim
from jobs.exceptions import InvalidTransition
from jobs.lifecycle import job_retry_schedule
from jobs.models import Job, JobEvent
from jobs.reaper import jobs_reap
from jobs.retry import Action, Category, Decision
from jobs.runtime import Outcome
from jobs.services import job_cancel
from tests.harness import Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_queued_job_cancelled_at_once__never_runs(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    cancelled = job_cancel(job_id=job.pk, actor="carol")
    assert cancelled.state == "cancelled" and cancelled.finished_at is not None
    event = JobEvent.objects.get(job=job, to_state="cancelled")
    assert (event.from_state, event.actor) == ("queued", "carol")
    # The message already published for it runs nothing.
    assert jobs.execute(job.pk).outcome is Outcome.DUPLICATE
    assert Job.objects.get(pk=job.pk).attempt == 0


def test_retry_wait_job_cancelled_at_once__pending_retry_dropped(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    lease = job_claim(job, worker="w:1", lease_seconds=30)
    assert lease is not None
    job_retry_schedule(
        lease,
        decision=Decision(Action.RETRY, Category.TRANSIENT, "retry after test", 0.0),
        error_message="TransientError: test",
    )
    assert Job.objects.get(pk=job.pk).state == "retry_wait"
    cancelled = job_cancel(job_id=job.pk, actor="carol")
    assert cancelled.state == "cancelled"
    assert JobEvent.objects.get(job=job, to_state="cancelled").from_state == "retry_wait"
    assert jobs.execute(job.pk).outcome is Outcome.DUPLICATE  # the due retry runs nothing


def test_cancel_twice_is_harmless__already_cancelled(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    job_cancel(job_id=job.pk, actor="carol")
    assert job_cancel(job_id=job.pk, actor="carol").state == "cancelled"
    assert JobEvent.objects.filter(job=job, to_state="cancelled").count() == 1


def test_finished_job_cannot_be_cancelled__succeeded(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED
    with pytest.raises(InvalidTransition, match="can no longer be cancelled"):
        job_cancel(job_id=job.pk, actor="carol")
    assert Job.objects.get(pk=job.pk).state == "succeeded"


def test_leased_job_cancelled_through_heartbeat__handler_stops(harness: Harness, user: Any) -> None:
    harness.start_worker("w1")
    job = jobs.submit(kind="drill.sleep", input={"seconds": 120}, owner=user)
    wait_until(lambda: Job.objects.get(pk=job.pk).state == "leased", timeout=60, what="job leased")
    requested = job_cancel(job_id=job.pk, actor="carol")
    assert requested.state == "leased" and requested.cancel_requested_at is not None
    # drill.sleep's lease is 10s: the heartbeat (every ~3.3s) carries the request.
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "cancelled", timeout=60, what="cancelled"
    )
    job.refresh_from_db()
    assert job.finished_at is not None and job.started_at is not None
    assert job.finished_at - job.started_at < timedelta(seconds=60)
    assert job.finished_at <= timezone.now()
    events = list(JobEvent.objects.filter(job=job).order_by("at", "id"))
    asked = [e for e in events if e.reason == "cancel requested"]
    assert len(asked) == 1 and asked[0].actor == "carol"
    assert events[-1].to_state == "cancelled" and events[-1].worker.startswith("w1")
    assert events[-1].reason == "cancelled while running"
    assert [e.to_state for e in events].count("cancelled") == 1


def test_cancel_request_honoured_by_reaper__owner_died_before_heartbeat(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    assert job_claim(job, worker="dead:1", lease_seconds=0.2) is not None
    assert job_cancel(job_id=job.pk, actor="carol").state == "leased"
    # The owner never heartbeats again; once its lease ends the reaper finishes the request.
    wait_until(lambda: jobs_reap().cancelled == 1, timeout=30, what="reaper to cancel")
    job.refresh_from_db()
    assert job.state == "cancelled" and job.attempt == 1
    assert JobEvent.objects.filter(job=job, to_state="cancelled").get().reason == (
        "cancelled: lease expired"
    )
    assert not JobEvent.objects.filter(job=job, to_state="retry_wait").exists()
    assert jobs.execute(job.pk).outcome is Outcome.DUPLICATE
