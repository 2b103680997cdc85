"""A lease this worker cannot be sure of (no heartbeat answered within the lease, by its own
monotonic clock, less a tenth as margin) stops the handler and starts no external effect."""

from __future__ import annotations

import time
from typing import Any

import pytest

import jobs
from jobs.claims import job_claim_id
from jobs.context import LEASE_DOUBT_FRACTION, JobContext
from jobs.exceptions import LeaseLost
from jobs.leases import Lease
from jobs.models import EffectLedgerEntry
from jobs.registry import kind_latest
from jobs.runtime import Outcome, judge

pytestmark = pytest.mark.django_db(transaction=True)


def _lease(user: Any) -> Lease:
    job = jobs.submit(kind="noop", input={}, owner=user)
    lease = job_claim_id(job.pk, worker="doubt-test:1:1", kind="noop", kind_version=1).lease
    assert lease is not None
    return lease


def _doubtful(lease: Lease) -> JobContext:
    """A context whose last answered extension was sent just over (1 - margin) leases ago."""
    ago = lease.lease_seconds * (1 - LEASE_DOUBT_FRACTION) + 0.5
    return JobContext(lease, extended_at=time.monotonic() - ago)


def test_effect_not_started__no_extension_answered_within_the_lease(user: Any) -> None:
    lease = _lease(user)
    ctx = _doubtful(lease)
    calls: list[str] = []
    assert ctx.lease_in_doubt and ctx.cancelled and not ctx.lease_lost
    with pytest.raises(LeaseLost, match="not started"):
        ctx.effect("notice", lambda key: calls.append(key))
    assert calls == []
    assert not EffectLedgerEntry.objects.filter(job_id=lease.job_id).exists()

    ctx.heartbeat()  # the database answers again, and the lease was still ours
    assert not ctx.lease_in_doubt and not ctx.cancelled
    ctx.effect("notice", lambda key: calls.append(key))
    assert len(calls) == 1


def test_fresh_lease__not_in_doubt(user: Any) -> None:
    ctx = JobContext(_lease(user))
    assert not ctx.lease_in_doubt and not ctx.cancelled
    assert ctx.lease_left() > 0


def test_result_of_a_run_told_to_stop_on_doubt__discarded(user: Any) -> None:
    lease = _lease(user)
    ctx = _doubtful(lease)
    assert ctx.cancelled  # what the handler saw before it returned early
    verdict = judge(lease, kind_latest("noop"), ctx, {"stopped": True}, None)
    assert verdict.outcome is Outcome.STALE and verdict.completion is None
