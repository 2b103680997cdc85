"""A claim the database lost (a failover to a standby that had not received the asynchronously
committed claim) is found when the worker's next fenced write matches nothing: the job, back
to `queued` at an earlier generation, gets a new message at once (jobs.dispatch
.send_again_if_claim_lost) instead of waiting for the redelivery check. A lease lost to another
claimer gets none: that claimer runs the job."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest

import jobs
import tests.kinds_batch  # noqa: F401  (registers the batch kinds in this process too)
from jobs import batch, runtime
from jobs.models import Job
from jobs.runtime import Outcome
from outbox.models import OutboxEntry
from tests.kinds_batch import THIEF

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _rows_stay_in_the_outbox(settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False


def _rows(job: Job) -> list[OutboxEntry]:
    return list(OutboxEntry.objects.filter(job_id=job.pk).order_by("id"))


def _item(job: Job) -> dict[str, Any]:
    return dict(_rows(job)[-1].kwargs)


def test_single_delivery__its_own_claim_lost__the_job_is_sent_again(user: Any) -> None:
    job = jobs.submit(kind="batch.forget", input={"victim": str(uuid4())}, owner=user)
    # The handler forgets the claim of the job it runs in (its input names it).
    Job.objects.filter(pk=job.pk).update(input={"victim": str(job.pk)})
    before = len(_rows(job))

    report = runtime.execute(job.pk, kind="batch.forget", kind_version=1)

    assert report.outcome is Outcome.STALE
    job.refresh_from_db()
    assert (job.state, job.generation) == ("queued", 0)
    rows = _rows(job)
    assert len(rows) == before + 1 and rows[-1].published_at is None
    assert rows[-1].kwargs["job_id"] == str(job.pk)


def test_batch__a_members_claim_lost__only_that_job_is_sent_again(user: Any) -> None:
    victim = jobs.submit(kind="batch.echo", input={}, owner=user)
    forget = jobs.submit(kind="batch.forget", input={"victim": str(victim.pk)}, owner=user)
    before = {j.pk: len(_rows(j)) for j in (victim, forget)}

    reports = batch.execute_many([_item(forget), _item(victim)])

    outcomes = {r.job_id: r.outcome for r in reports}
    assert outcomes == {str(forget.pk): Outcome.SUCCEEDED, str(victim.pk): Outcome.STALE}
    assert len(_rows(victim)) == before[victim.pk] + 1
    assert len(_rows(forget)) == before[forget.pk]
    victim.refresh_from_db()
    assert victim.state == "queued"


def test_batch__a_lease_taken_over_by_another_claimer__no_new_message(user: Any) -> None:
    victim = jobs.submit(kind="batch.echo", input={}, owner=user)
    thief = jobs.submit(kind="batch.thief", input={"victim": str(victim.pk)}, owner=user)
    before = len(_rows(victim))

    reports = batch.execute_many([_item(thief), _item(victim)])

    assert {r.job_id: r.outcome for r in reports}[str(victim.pk)] is Outcome.STALE
    assert len(_rows(victim)) == before
    victim.refresh_from_db()
    assert (victim.state, victim.lease_owner) == ("leased", THIEF)
