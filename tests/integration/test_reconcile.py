"""Reconciliation against real servers: lost broker messages, exit codes, the JSON report."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

import jobs
from jobs.models import EffectLedgerEntry, Job, JobEvent
from jobs.ops.reconcile import lost_jobs, reconcile_run
from jobs.tasks import reconcile as reconcile_task
from outbox.models import OutboxEntry
from tests.conftest import point_celery
from tests.harness import PrivateRedis, harness_for, queue_length, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _all_published() -> bool:
    return not OutboxEntry.objects.filter(published_at__isnull=True).exists()


def test_reconcile_repairs_jobs_lost_by_redis_restart__messages_gone(
    lossy_redis: PrivateRedis, user: Any
) -> None:
    submitted = [jobs.submit(kind="noop", input={"n": i}, owner=user) for i in range(5)]
    wait_until(_all_published, timeout=30, what="fast path to publish every job")
    broker = redis.Redis(port=lossy_redis.port)
    assert queue_length(broker) == 5  # the messages are in Redis, nobody consumes them yet
    broker.close()

    lossy_redis.restart()  # no persistence: the five messages are gone
    point_celery(lossy_redis.url)
    assert queue_length(redis.Redis(port=lossy_redis.port)) == 0

    with harness_for(lossy_redis.url) as h:
        check = h.manage("jobs_reconcile", "--json", "--stale-after", "0", check=False)
        assert check.returncode == 3, check.stderr
        report = json.loads(check.stdout)
        assert sorted(report["lost"]) == sorted(str(j.pk) for j in submitted)
        assert report["repaired"] == []
        assert "lost work: 5" in report["broken"][0]
        assert "lost work" in check.stderr

        repair = h.manage("jobs_reconcile", "--repair", "--json", "--stale-after", "0", check=False)
        assert repair.returncode == 0, repair.stderr + repair.stdout
        assert sorted(json.loads(repair.stdout)["repaired"]) == sorted(report["lost"])
        assert JobEvent.objects.filter(actor="reconciler").count() == 5

        h.start_worker("w-reconcile")
        h.start_relay()
        wait_until(
            lambda: Job.objects.filter(state="succeeded").count() == 5,
            timeout=60,
            what="every repaired job to succeed",
        )
    for job in Job.objects.all():
        assert job.generation == 1  # ran exactly once
    after = reconcile_run(repair=False, stale_after=0)
    assert after.ok and after.lost == []
    assert {k.kind: (k.accepted, k.terminal) for k in after.kinds or ()} == {"noop": (5, 5)}


def test_lost_jobs_skip_work_still_in_flight__unpublished_recent_or_waiting_its_turn(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False  # every row stays unpublished until we say so
    unpublished = jobs.submit(kind="noop", input={"k": "unpublished"}, owner=user)
    head = jobs.submit(kind="noop", input={"k": "head"}, owner=user, serialization_key="doc-1")
    behind = jobs.submit(kind="noop", input={"k": "behind"}, owner=user, serialization_key="doc-1")
    assert not OutboxEntry.objects.filter(job_id=behind.pk).exists()  # waits for its turn
    past = timezone.now() - timedelta(hours=1)
    Job.objects.update(next_attempt_at=past)
    OutboxEntry.objects.update(created_at=past - timedelta(minutes=1))
    OutboxEntry.objects.filter(job_id=head.pk).update(published_at=past)

    # The relay still owes `unpublished` a message; `behind` is not at the head of its key.
    assert list(lost_jobs(stale_after=60).values_list("pk", flat=True)) == [head.pk]
    assert unpublished.pk not in set(lost_jobs(stale_after=0).values_list("pk", flat=True))
    # Published just now: it may be waiting in a long queue, not lost.
    OutboxEntry.objects.filter(job_id=head.pk).update(published_at=timezone.now())
    assert not lost_jobs(stale_after=600).exists()


def test_reconcile_command_exits_nonzero__expired_lease_and_stale_effect(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    long_ago = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk=job.pk).update(
        state="leased", generation=1, attempt=1, lease_owner="ghost:1", lease_until=long_ago
    )
    EffectLedgerEntry.objects.create(
        job=job,
        input_version=1,
        name="notice",
        idempotency_key=f"{job.pk}:1:notice",
        state="pending",
        generation=1,
    )
    EffectLedgerEntry.objects.filter(job=job).update(updated_at=long_ago)

    with pytest.raises(CommandError) as raised:
        call_command("jobs_reconcile", "--stale-after", "60")
    assert raised.value.returncode == 3
    assert "expired leases: 1" in str(raised.value)
    assert "stale effects: 1" in str(raised.value)
    report = reconcile_run(stale_after=60)
    assert (report.expired_leases, report.stale_effects, report.ok) == (1, 1, False)


def test_beat_reconcile__checks_every_invariant_without_reading_the_whole_job_table(
    user: Any,
) -> None:
    """Beat runs it every JOBS_RECONCILE_INTERVAL: a read of every job row (the per-kind
    counts, history included) would grow with the table and was never in its stored result."""
    jobs.submit(kind="noop", input={}, owner=user)
    job = jobs.submit(kind="noop", input={}, owner=user)
    Job.objects.filter(pk=job.pk).update(
        state="leased",
        generation=1,
        attempt=1,
        lease_owner="ghost:1",
        lease_until=timezone.now() - timedelta(hours=1),
    )
    statements: list[str] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(" ".join(sql.split()))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        result = reconcile_task()
    assert (result["ok"], result["expired_leases"], result["lost"]) == (False, 1, 0)
    reads = [sql for sql in statements if re.search(r"\bFROM \"?jobs_job\b", sql)]
    assert reads, statements  # it did look at the jobs (the lease check at least)
    assert [sql for sql in reads if " WHERE " not in sql] == []
    # The operator's report (jobs_reconcile) still counts every kind.
    assert {k.kind: k.accepted for k in reconcile_run(stale_after=60).kinds or ()} == {"noop": 2}


def test_reconcile_command_prints_counts_per_kind__healthy_system(
    user: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    Job.objects.all().delete()
    jobs.submit(kind="noop", input={}, owner=user)
    call_command("jobs_reconcile", "--stale-after", "600")
    out = capsys.readouterr().out
    assert "noop" in out and "OK: every invariant holds" in out


def test_reconcile_command_rejects_negative_threshold__readable_error() -> None:
    with pytest.raises(CommandError, match="zero or more"):
        call_command("jobs_reconcile", "--stale-after", "-1")


def test_lost_jobs_leave_capped_work_to_the_handover__kind_limit_full(
    user: Any, settings: Any
) -> None:
    import tests.kinds_ordering  # noqa: F401  (quota.work: kind_limit=2)
    from jobs.claims import job_claim
    from jobs.lifecycle import job_complete
    from jobs.ops.reconcile import lost_job_ids

    settings.OUTBOX_FAST_PATH = False
    quota = [jobs.submit(kind="quota.work", input={"n": n}, owner=user) for n in range(4)]
    held = quota[3]
    assert not OutboxEntry.objects.filter(job_id=held.pk).exists()  # waits in the table
    leases = [job_claim(job, worker="w:1", lease_seconds=600) for job in quota[:2]]
    assert all(leases)
    # quota[2] had a message, a worker deferred it (kind full), and it waits for a hand-over.
    past = timezone.now() - timedelta(hours=1)
    OutboxEntry.objects.update(created_at=past - timedelta(minutes=1), published_at=past)
    Job.objects.filter(state="queued").update(next_attempt_at=past)

    assert lost_job_ids(stale_after=60) == []
    first = leases[0]
    assert first is not None
    job_complete(first, result={"n": 0}, local_effects=[])  # a slot frees up
    handed = OutboxEntry.objects.filter(published_at__isnull=True)
    assert list(handed.values_list("job_id", flat=True)) == [quota[2].pk]  # the hand-over
    assert lost_job_ids(stale_after=60) == []  # its new row is the relay's business
    # The broker loses that message too: now it is lost work; `held` still waits its turn.
    handed.update(created_at=past - timedelta(minutes=1), published_at=past)
    assert lost_job_ids(stale_after=60) == [quota[2].pk]
