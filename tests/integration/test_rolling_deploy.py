"""A worker without the job's kind version leaves the job for a compatible worker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import jobs
from jobs import registry
from jobs.context import JobContext
from jobs.counters import INCOMPATIBLE_DEPLOYMENT, counter_value
from jobs.models import Job
from outbox import marks
from outbox.models import OutboxEntry
from outbox.services import outbox_prune

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_versions() -> Iterator[None]:
    def v1(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
        return {"ran": 1}

    def v2(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
        return {"ran": 2}

    registry.handler("rolling.kind", version=1)(v1)
    registry.handler("rolling.kind", version=2)(v2)
    yield
    registry.unregister("rolling.kind")


def test_job_of_an_unknown_version_is_released_without_spending_an_attempt(
    two_versions: None, user: Any
) -> None:
    job = jobs.submit(kind="rolling.kind", input={}, owner=user)
    assert job.kind_version == 2
    marks.flush()  # the submit's own row is published; its mark is batched
    registry._registry["rolling.kind"].pop(2)  # this "worker" is still on the old release
    report = jobs.execute(job.pk)
    assert report.outcome.value == "incompatible"
    job.refresh_from_db()
    assert (job.state, job.attempt, job.generation) == ("retry_wait", 0, 1)
    assert job.next_attempt_at is not None and job.next_attempt_at > timezone.now()
    assert counter_value(INCOMPATIBLE_DEPLOYMENT, label="rolling.kind:v2") == 1
    due = OutboxEntry.objects.filter(job_id=job.pk, published_at__isnull=True).get()
    assert due.available_at == job.next_attempt_at
    # The new release arrives; the job runs on it with its full attempt budget.
    registry.handler("rolling.kind", version=2)(lambda ctx, input: {"ran": 2})
    Job.objects.filter(pk=job.pk).update(next_attempt_at=timezone.now())
    assert jobs.execute(job.pk).outcome.value == "succeeded"
    job.refresh_from_db()
    assert (job.result, job.attempt) == ({"ran": 2}, 1)


def test_published_outbox_rows_are_pruned_after_retention__a_jobs_newest_and_unpublished_kept(
    user: Any,
) -> None:
    """A due job's newest published row is the reconciler's proof that it had a message: it
    stays however old (it goes with the job, jobs.retention); older rows of the job go."""
    old = jobs.submit(kind="noop", input={"n": 1}, owner=user)
    pending = jobs.submit(kind="noop", input={"n": 2}, owner=user)
    long_ago = timezone.now() - timedelta(days=8)
    newest = OutboxEntry.objects.get(job_id=old.pk)
    newest.pk = None
    newest.save()  # a republish of the job; both published long ago
    OutboxEntry.objects.filter(job_id=old.pk).update(published_at=long_ago, created_at=long_ago)
    OutboxEntry.objects.filter(job_id=pending.pk).update(published_at=None)

    assert outbox_prune(older_than=timedelta(days=7)) == 1

    assert list(OutboxEntry.objects.filter(job_id=old.pk).values_list("pk", flat=True)) == [
        newest.pk
    ]
    assert OutboxEntry.objects.filter(job_id=pending.pk).exists()
    assert outbox_prune(older_than=timedelta(days=7)) == 0
