"""Retention (jobs/retention.py, issue 28): finished jobs past JOBS_RETENTION_SECONDS are
deleted with what they own, in bounded batches; a job something that stays refers to is
kept; active, waiting and quarantined jobs never go."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any
from uuid import UUID

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import jobs
import tests.kinds_links  # noqa: F401  (registers the kinds in this process too)
from jobs.counters import PRUNED, counter_value
from jobs.models import EffectLedgerEntry, Job, JobDependency, JobEvent, QuarantineRecord
from jobs.retention import jobs_prune, prune_batch
from jobs.runtime import Outcome
from jobs.services import job_cancel
from outbox.models import OutboxEntry

pytestmark = pytest.mark.django_db(transaction=True)

DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _rows_stay_in_the_outbox(settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False


def _age(*ids: Any, by: timedelta = 10 * DAY) -> None:
    """As if these jobs finished `by` ago (a job not finished has no finished_at: the database
    refuses one, jobs_job_finished_iff_terminal); the others as if created then."""
    then = timezone.now() - by
    Job.objects.filter(pk__in=ids, finished_at__isnull=False).update(finished_at=then)
    Job.objects.filter(pk__in=ids).update(created_at=then)


def _ran(user: Any, kind: str = "links.leaf", **input: Any) -> Job:
    job = jobs.submit(kind=kind, input=input, owner=user)
    jobs.execute(job.pk)
    return Job.objects.get(pk=job.pk)


def _exists(*ids: Any) -> set[UUID]:
    return set(Job.objects.filter(pk__in=ids).values_list("pk", flat=True))


def test_old_finished_jobs__deleted_with_their_rows__recent_active_and_quarantined_kept(
    user: Any,
) -> None:
    old_ok = _ran(user)
    old_failed_to_quarantine = _ran(user, fail=True)
    assert old_failed_to_quarantine.state == "quarantined"
    cancelled = jobs.submit(kind="links.leaf", input={"c": 1}, owner=user)
    job_cancel(job_id=cancelled.pk, actor="test")
    recent = _ran(user, n=2)
    queued = jobs.submit(kind="links.leaf", input={"q": 1}, owner=user)
    _age(old_ok.pk, old_failed_to_quarantine.pk, cancelled.pk, queued.pk)
    assert JobEvent.objects.filter(job_id=old_ok.pk).exists()

    result = jobs_prune(older_than=7 * DAY)

    assert result.deleted == 2
    assert _exists(old_ok.pk, cancelled.pk) == set()
    assert _exists(old_failed_to_quarantine.pk, recent.pk, queued.pk) == {
        old_failed_to_quarantine.pk,
        recent.pk,
        queued.pk,
    }
    assert not JobEvent.objects.filter(job_id__in=[old_ok.pk, cancelled.pk]).exists()
    # Their outbox rows went with them (outbox_prune keeps a job's newest row while it is there).
    assert not OutboxEntry.objects.filter(job_id__in=[old_ok.pk, cancelled.pk]).exists()
    assert OutboxEntry.objects.filter(job_id=recent.pk).exists()
    assert JobEvent.objects.filter(job_id=recent.pk).exists()
    assert QuarantineRecord.objects.filter(job_id=old_failed_to_quarantine.pk).exists()
    # What went is counted by end state (the metrics add it back: their totals never drop).
    assert counter_value(PRUNED, label="succeeded") == 1
    assert counter_value(PRUNED, label="cancelled") == 1
    assert counter_value(PRUNED, label="quarantined") == 0


def test_a_run_with_nothing_old_enough__sends_no_delete(user: Any) -> None:
    """`DELETE ... WHERE id = ANY('{}')` is false, which implies every partial index's
    condition: the planner may walk one whole (1.1 s under the soak's held horizon)."""
    recent = _ran(user)
    with CaptureQueriesContext(connection) as queries:
        result = jobs_prune(older_than=7 * DAY)

    assert (result.deleted, result.kept) == (0, 0)
    assert not [q["sql"] for q in queries if "DELETE" in q["sql"].upper()]
    assert _exists(recent.pk) == {recent.pk}


def test_a_discarded_job__deleted_with_its_quarantine_record_and_ledger(user: Any) -> None:
    from jobs.quarantine import quarantine_discard

    job = _ran(user, fail=True)
    record = QuarantineRecord.objects.get(job_id=job.pk)
    quarantine_discard(record_id=record.pk, actor="ops", note="bad input")
    _age(job.pk)

    assert jobs_prune(older_than=7 * DAY).deleted == 1

    assert not QuarantineRecord.objects.filter(pk=record.pk).exists()
    assert not EffectLedgerEntry.objects.filter(job_id=job.pk).exists()


def test_a_parent_with_a_child_that_stays__kept__then_both_go_together(user: Any) -> None:
    parent = _ran(user, kind="links.fan_out", n=1)
    [child] = Job.objects.filter(parent=parent)
    _age(parent.pk)

    kept = jobs_prune(older_than=7 * DAY)
    assert (kept.deleted, kept.kept) == (0, 1)  # its child has not even run
    assert _exists(parent.pk) == {parent.pk}

    assert jobs.execute(child.pk).outcome is Outcome.SUCCEEDED
    _age(parent.pk, child.pk)
    both = jobs_prune(older_than=7 * DAY)

    assert both.deleted == 2  # one batch: the child's reference goes with it
    assert _exists(parent.pk, child.pk) == set()


def test_a_dependency_of_a_waiting_job__kept_until_the_waiter_ended(user: Any) -> None:
    done = _ran(user)
    other = jobs.submit(kind="links.leaf", input={"o": 1}, owner=user)
    waiter = jobs.submit(kind="links.join", input={}, owner=user, after=[done.pk, other.pk])
    _age(done.pk)

    assert jobs_prune(older_than=7 * DAY).deleted == 0
    assert JobDependency.objects.filter(waiter=waiter, dependency=done).exists()

    assert jobs.execute(other.pk).outcome is Outcome.SUCCEEDED
    assert jobs.execute(waiter.pk).outcome is Outcome.SUCCEEDED
    _age(done.pk, other.pk, waiter.pk)

    assert jobs_prune(older_than=7 * DAY).deleted == 3
    assert not JobDependency.objects.exists()


def test_batches_are_bounded__a_run_walks_past_the_jobs_it_keeps(user: Any) -> None:
    # The two oldest are pinned by a child that has not run; five prunable ones are newer.
    pinned = [_ran(user, kind="links.fan_out", n=1) for _ in range(2)]
    _age(*[p.pk for p in pinned], by=20 * DAY)
    prunable = [_ran(user, k=i) for i in range(5)]
    _age(*[p.pk for p in prunable])

    one = prune_batch(older_than=7 * DAY, batch=2)
    assert (one.deleted, one.kept) == (0, 2)  # a batch of two: the two pinned ones

    run = jobs_prune(older_than=7 * DAY, batch=2)

    assert run.deleted == 5 and run.batches == 4  # 2 kept, 2 + 2 + 1 deleted
    assert _exists(*[p.pk for p in prunable]) == set()
    assert len(_exists(*[p.pk for p in pinned])) == 2


def test_retention_zero__the_beat_task_keeps_every_job(user: Any, settings: Any) -> None:
    from jobs.tasks import prune

    job = _ran(user)
    _age(job.pk, by=1000 * DAY)
    settings.JOBS_RETENTION_SECONDS = 0

    assert prune() == {"deleted": 0, "kept": 0, "batches": 0}
    assert _exists(job.pk) == {job.pk}

    settings.JOBS_RETENTION_SECONDS = 24 * 3600.0
    assert prune()["deleted"] == 1


def test_jobs_prune_command__prints_counts__refuses_bad_arguments(user: Any) -> None:
    job = _ran(user)
    _age(job.pk, by=2 * DAY)
    out = StringIO()

    call_command("jobs_prune", "--older-than", str(DAY.total_seconds()), stdout=out)

    assert out.getvalue().strip() == "deleted=1 kept=0 batches=1"
    with pytest.raises(CommandError, match="--older-than must be a positive"):
        call_command("jobs_prune", "--older-than", "0")
    with pytest.raises(CommandError, match="--batch must be at least 1"):
        call_command("jobs_prune", "--batch", "0")
