"""The reaper on real Postgres: expired leases become retries or quarantine, exactly once."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs import lifecycle
from jobs.claims import job_claim
from jobs.counters import EXPIRED_LEASES, STALE_WRITES_REJECTED, counter_value
from jobs.exceptions import LeaseLost
from jobs.leases import Lease
from jobs.models import Job, JobEvent, QuarantineRecord
from jobs.reaper import jobs_reap
from jobs.retry import backoff_ceiling
from outbox.models import OutboxEntry
from tests.harness import ROOT, Harness
from tests.integration.due import assert_due_at

pytestmark = pytest.mark.django_db(transaction=True)


def expired_leased_job(owner: Any, *, kind: str = "noop", attempt: int = 1, **fields: Any) -> Job:
    """Factory: a row a dead worker left behind (leased, lease ended a minute ago)."""
    now = timezone.now()
    defaults: dict[str, Any] = {
        "kind": kind,
        "kind_version": 1,
        "owner": owner,
        "request_fingerprint": "f" * 64,
        "input": {},
        "state": "leased",
        "attempt": attempt,
        "generation": attempt,
        "max_attempts": 3,
        "lease_owner": "ghost:1",
        "lease_until": now - timedelta(seconds=60),
        "heartbeat_at": now - timedelta(seconds=90),
        "next_attempt_at": now - timedelta(seconds=120),
        "deadline": now + timedelta(hours=1),
    }
    defaults.update(fields)
    return Job(**defaults)


def _create(job: Job) -> Job:
    job.save(force_insert=True)
    return job


def test_expired_lease_becomes_retry_wait__within_budget(user: Any) -> None:
    job = _create(expired_leased_job(user))
    result = jobs_reap()
    assert (result.expired, result.retried, result.quarantined) == (1, 1, 0)
    job.refresh_from_db()
    assert job.state == "retry_wait"
    assert job.generation == 1  # the reaper fences, it does not claim
    event = JobEvent.objects.get(job=job, to_state="retry_wait")
    assert event.reason == "retry after lease expired 1 times"
    assert event.details["category"] == "lease_expired"
    assert 0 <= event.details["delay_seconds"] <= backoff_ceiling(1, base=1.0, cap=300.0)
    entry = OutboxEntry.objects.get(job_id=job.pk)
    assert_due_at(entry, job.next_attempt_at)
    assert entry.kwargs == {
        "job_id": str(job.pk),
        "generation": 1,
        "kind": job.kind,
        "kind_version": job.kind_version,
    }
    assert counter_value(EXPIRED_LEASES) == 1


def test_live_lease_is_left_alone__not_expired(user: Any) -> None:
    job = _create(expired_leased_job(user, lease_until=timezone.now() + timedelta(seconds=60)))
    assert jobs_reap().expired == 0
    job.refresh_from_db()
    assert job.state == "leased"
    assert not OutboxEntry.objects.filter(job_id=job.pk).exists()


def test_quarantine_says_lease_expired_n_times__attempt_budget_spent(user: Any) -> None:
    # Two earlier expiries on the trail (one reaped, one taken over by a worker).
    job = _create(expired_leased_job(user, kind="drill.crash", attempt=3))
    JobEvent.objects.create(
        job=job,
        from_state="leased",
        to_state="retry_wait",
        generation=1,
        attempt=1,
        reason="retry after lease expired 1 times",
        details={"category": "lease_expired"},
    )
    JobEvent.objects.create(
        job=job,
        from_state="leased",
        to_state="leased",
        generation=3,
        attempt=3,
        reason="took over expired lease",
    )
    result = jobs_reap()
    assert (result.retried, result.quarantined) == (0, 1)
    job.refresh_from_db()
    assert job.state == "quarantined"
    record = QuarantineRecord.objects.get(job=job)
    assert "lease expired 3 times" in record.reason
    assert record.reason.startswith("attempt budget exhausted after 3")
    assert record.category == "lease_expired"
    assert record.attempts == 3
    assert record.responsible == "platform-team"  # from drill.crash's kind config
    assert record.status == "open"


def test_expiry_count_restarts__after_redrive(user: Any) -> None:
    job = _create(expired_leased_job(user, kind="drill.crash", attempt=1, generation=4))
    for generation in (1, 2, 3):
        JobEvent.objects.create(
            job=job,
            from_state="leased",
            to_state="retry_wait",
            generation=generation,
            attempt=generation,
            reason=f"retry after lease expired {generation} times",
            details={"category": "lease_expired"},
        )
    JobEvent.objects.create(
        job=job,
        from_state="quarantined",
        to_state="queued",
        generation=3,
        attempt=3,
        actor="carol",
        reason="redriven: fixed",
    )
    assert jobs_reap().retried == 1
    event = JobEvent.objects.filter(job=job, to_state="retry_wait").order_by("-id").first()
    assert event is not None and event.reason == "retry after lease expired 1 times"


def test_quarantine_on_deadline__elapsed_budget_spent(user: Any) -> None:
    job = _create(
        expired_leased_job(user, attempt=1, deadline=timezone.now() - timedelta(seconds=1))
    )
    assert jobs_reap().quarantined == 1
    record = QuarantineRecord.objects.get(job=job)
    assert record.reason == "elapsed budget exhausted: lease expired 1 times"


def test_stale_owner_write_rejected__after_reap(user: Any) -> None:
    job = _create(expired_leased_job(user, attempt=1))
    stale = Lease(
        job_id=job.pk,
        generation=1,
        attempt=1,
        worker="ghost:1",
        lease_seconds=30,
        kind="noop",
        kind_version=1,
        input_version=1,
        owner_id=user.pk,
        tenant_id=None,
        serialization_key=None,
        deadline=job.deadline,
        previous_state="queued",
        claimed_at=timezone.now(),
    )
    jobs_reap()
    before = counter_value(STALE_WRITES_REJECTED)
    with pytest.raises(LeaseLost):
        lifecycle.job_complete(stale, result={"late": True}, local_effects=[])
    assert counter_value(STALE_WRITES_REJECTED) == before + 1
    job.refresh_from_db()
    assert job.state == "retry_wait" and job.result is None


def test_claim_leaves_expired_lease_to_reaper__attempt_budget_spent(user: Any) -> None:
    # A redelivered message for a poison job must not take it over past its budget.
    job = _create(expired_leased_job(user, attempt=3))
    assert job_claim(job, worker="w:1", lease_seconds=5) is None
    within = _create(expired_leased_job(user, attempt=1))
    lease = job_claim(within, worker="w:1", lease_seconds=5)
    assert lease is not None and lease.attempt == 2 and lease.generation == 2


def _bulk_expired(owner: Any, count: int) -> list[Job]:
    return Job.objects.bulk_create(expired_leased_job(owner) for _ in range(count))


def _assert_each_reenqueued_once(jobs: list[Job]) -> None:
    ids = {job.pk for job in jobs}
    per_job_outbox = Counter(
        OutboxEntry.objects.filter(job_id__in=ids).values_list("job_id", flat=True)
    )
    per_job_events = Counter(
        JobEvent.objects.filter(job_id__in=ids, to_state="retry_wait").values_list(
            "job_id", flat=True
        )
    )
    assert set(per_job_outbox) == ids
    assert set(per_job_outbox.values()) == {1}
    assert set(per_job_events) == ids
    assert set(per_job_events.values()) == {1}
    assert Job.objects.filter(pk__in=ids, state="retry_wait").count() == len(ids)


def test_two_reapers_reenqueue_each_job_once__1000_expired_leases_threads(user: Any) -> None:
    jobs = _bulk_expired(user, 1000)
    barrier = threading.Barrier(2)
    totals: list[int] = []
    errors: list[BaseException] = []

    def reaper() -> None:
        try:
            barrier.wait(timeout=30)
            done = 0
            while True:
                result = jobs_reap(limit=100)
                done += result.retried
                if result.expired == 0:
                    break
            totals.append(done)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()  # each thread owned its own connection

    threads = [threading.Thread(target=reaper) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not errors, errors
    assert sum(totals) == 1000
    _assert_each_reenqueued_once(jobs)


def test_two_reaper_processes_reenqueue_each_job_once__1000_expired_leases(
    harness: Harness, user: Any
) -> None:
    jobs = _bulk_expired(user, 1000)
    argv = [sys.executable, "manage.py", "jobs_reap", "--limit", "100"]
    procs = [
        subprocess.Popen(
            argv,
            cwd=ROOT,
            env=harness.base_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=240) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    retried = sum(int(out.split("retried=")[1].split()[0]) for out, _ in outputs)
    assert retried == 1000
    _assert_each_reenqueued_once(jobs)
