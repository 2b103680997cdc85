"""The fence is (generation, owner token): a claim lost in a database crash cannot be reused."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

import jobs
from jobs.claims import job_claim
from jobs.counters import STALE_WRITES_REJECTED, counter_value
from jobs.exceptions import LeaseLost
from jobs.identity import lease_owner_token
from jobs.leases import lease_heartbeat
from jobs.lifecycle import job_complete
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def _forget_claim_as_a_crash_would(job_id: Any) -> None:
    """An asynchronously committed claim lost by a PostgreSQL crash: the row is as before.

    A crash is not an UPDATE, so the guard triggers (generation never goes down) are bypassed
    for this one statement, as WAL replay would.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        cursor.execute(
            "UPDATE jobs_job SET state = 'queued', generation = 0, attempt = 0, "
            "lease_owner = NULL, lease_until = NULL WHERE id = %s",
            [job_id],
        )
        cursor.execute("SET session_replication_role = origin")


def test_same_generation_after_lost_claim__only_the_new_owner_token_may_write(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    lost = job_claim(Job.objects.get(pk=job.pk), worker=lease_owner_token(), lease_seconds=30)
    assert lost is not None and lost.generation == 1
    _forget_claim_as_a_crash_would(job.pk)
    fresh = job_claim(Job.objects.get(pk=job.pk), worker=lease_owner_token(), lease_seconds=30)
    assert fresh is not None and fresh.generation == 1  # the number was handed out again
    assert fresh.worker != lost.worker

    assert lease_heartbeat(lost).alive is False
    with pytest.raises(LeaseLost):
        job_complete(lost, result={"from": "lost"}, local_effects=[])
    assert counter_value(STALE_WRITES_REJECTED) == 1
    job_complete(fresh, result={"from": "fresh"}, local_effects=[])
    done = Job.objects.get(pk=job.pk)
    assert (done.state, done.result, done.lease_owner) == (
        "succeeded",
        {"from": "fresh"},
        fresh.worker,
    )


def test_owner_token_is_fresh_per_claim_and_keeps_the_pid_last() -> None:
    first, second = lease_owner_token(), lease_owner_token()
    assert first != second
    assert first.rsplit(":", 1)[1].isdigit()
