"""The hot functions' lock waits end: a job row locked by another session (an operator's open
transaction) makes a heartbeat or a completion fail after lock_timeout with
`lock_not_available`, an answer of a reachable database (jobs.gate requeues the message and
goes on consuming: tests/chaos/test_lock_timeout.py); a claim does not wait at all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection

import jobs
from jobs.claims import job_claim, job_claim_id
from jobs.gate import database_unreachable, sqlstate
from jobs.identity import lease_owner_token
from jobs.leases import lease_heartbeat
from jobs.lifecycle import job_complete
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

LOCK_TIMEOUT = 5.0  # SET lock_timeout = 5000 in jobs/sql/*.sql


@contextmanager
def row_locked(job_id: Any) -> Iterator[None]:
    """Another session holds the job's row lock (SELECT ... FOR UPDATE) until the block ends."""
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=False) as other:
        other.execute("SELECT 1 FROM jobs_job WHERE id = %s FOR UPDATE", [job_id])
        try:
            yield
        finally:
            other.rollback()


def _refused_after_the_lock_timeout(call: Any) -> OperationalError:
    began = time.monotonic()
    with pytest.raises(OperationalError) as caught:
        call()
    waited = time.monotonic() - began
    assert LOCK_TIMEOUT - 0.5 <= waited < LOCK_TIMEOUT + 3, waited
    assert sqlstate(caught.value) == "55P03"
    assert not database_unreachable(caught.value)
    connection.close()  # as the gate does after a failed delivery
    return caught.value


@pytest.mark.timeout(60)
def test_claim_of_a_locked_row_does_not_wait_for_it(user: Any) -> None:
    """The claim skips a locked row (FOR UPDATE SKIP LOCKED): it answers at once, leases
    nothing, and the job stays claimable (its message, acked as deferred, is published again
    by the redelivery check: tests/integration/test_redeliver.py)."""
    job = jobs.submit(kind="noop", input={}, owner=user)
    with row_locked(job.pk):
        began = time.monotonic()
        claim = job_claim_id(job.pk, worker=lease_owner_token(), kind="noop", kind_version=1)
        assert time.monotonic() - began < 1.0
        assert claim.lease is None
    assert Job.objects.get(pk=job.pk).generation == 0  # nothing was written
    assert job_claim_id(job.pk, worker=lease_owner_token(), kind="noop", kind_version=1).lease


@pytest.mark.timeout(60)
def test_heartbeat_and_completion_of_a_locked_row_fail_after_the_lock_timeout(
    user: Any,
) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    lease = job_claim(Job.objects.get(pk=job.pk), worker=lease_owner_token(), lease_seconds=30)
    assert lease is not None
    with row_locked(job.pk):
        _refused_after_the_lock_timeout(lambda: lease_heartbeat(lease))
        _refused_after_the_lock_timeout(
            lambda: job_complete(lease, result={"ok": True}, local_effects=[])
        )
    assert lease_heartbeat(lease).alive
    job_complete(lease, result={"ok": True}, local_effects=[])
    assert Job.objects.get(pk=job.pk).state == "succeeded"
