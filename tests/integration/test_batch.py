"""The batch path (jobs.batch): one claim, one heartbeat and one group commit per message,
each job still fenced on its own and charged only for a handler that started."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import jobs
import tests.kinds_batch  # noqa: F401  (registers the batch kinds in this process too)
from jobs import batch, lifecycle, registry
from jobs.bulk_submit import job_submit_many
from jobs.claims import job_claim
from jobs.counters import (
    DUPLICATE_DELIVERIES,
    EFFECTS_REUSED,
    STALE_WRITES_REJECTED,
    counter_value,
)
from jobs.models import EffectLedgerEntry, Job, JobEvent, QuarantineRecord
from jobs.reaper import jobs_reap
from jobs.runtime import ExecutionReport, Outcome
from jobs.services import job_cancel
from outbox.models import OutboxEntry
from tests.harness import Harness, wait_until
from tests.integration.due import assert_due_at
from tests.kinds_batch import THIEF, calls

pytestmark = pytest.mark.django_db(transaction=True)

BATCH_CLAIM = ("leased", "claimed in a batch")
ONE_CLAIM = ("leased", "claimed")


@pytest.fixture(autouse=True)
def _rows_stay_in_the_outbox(settings: Any) -> None:
    """In-process tests build their messages from the outbox rows; nothing is published."""
    settings.OUTBOX_FAST_PATH = False


def _submit(user: Any, kind: str = "batch.echo", **input: Any) -> Job:
    return jobs.submit(kind=kind, input=input, owner=user)


def _item(job: Job) -> dict[str, Any]:
    """The kwargs of the job's newest outbox row: what the relay packs into a batch message."""
    row = OutboxEntry.objects.filter(job_id=job.pk).order_by("-id").first()
    assert row is not None, f"job {job.pk} has no outbox row"
    return dict(row.kwargs)


def _deliver(*batch_jobs: Job) -> dict[str, Outcome]:
    reports = batch.execute_many([_item(job) for job in batch_jobs])
    return _outcomes(reports)


def _deliver_items(items: list[dict[str, Any]]) -> dict[str, Outcome]:
    return _outcomes(batch.execute_many(items))


def _outcomes(reports: list[ExecutionReport]) -> dict[str, Outcome]:
    outcomes = {report.job_id: report.outcome for report in reports}
    assert len(outcomes) == len(reports), "one report per job"
    return outcomes


def _job(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def _due(job: Job) -> bool:
    due = _job(job).next_attempt_at
    return due is not None and due <= timezone.now()


def _trail(job: Job) -> list[tuple[str, str, int, int]]:
    """(to_state, reason, attempt, generation) of each event of the job, in order."""
    return list(
        JobEvent.objects.filter(job_id=job.pk)
        .order_by("id")
        .values_list("to_state", "reason", "attempt", "generation")
    )


def _claims(job: Job) -> list[tuple[str, str]]:
    return [(to, reason) for to, reason, _, _ in _trail(job) if to == "leased"]


def _runs(path: str, job: Job) -> int:
    return sum(1 for job_id, _, _ in calls(path) if job_id == str(job.pk))


def test_plain_batch__one_claim_and_one_completion_statement__each_job_once_attempt_one(
    user: Any, calls_file: str
) -> None:
    small = [_submit(user, n=n) for n in range(3)]
    large = [_submit(user, n=n) for n in range(3, 15)]

    small_items, large_items = [_item(job) for job in small], [_item(job) for job in large]

    with CaptureQueriesContext(connection) as few:
        small_outcomes = _outcomes(batch.execute_many(small_items))
    with CaptureQueriesContext(connection) as many:
        large_outcomes = _outcomes(batch.execute_many(large_items))

    for captured in (few, many):
        sqls = [query["sql"] for query in captured.captured_queries]
        assert sum("jobs_claim_many(" in sql for sql in sqls) == 1, sqls
        assert sum("jobs_complete_many(" in sql for sql in sqls) == 1, sqls
    # The statements of a batch do not grow with its size: nothing is sent per job.
    assert len(many.captured_queries) == len(few.captured_queries), sqls

    assert set(small_outcomes.values()) == set(large_outcomes.values()) == {Outcome.SUCCEEDED}
    for n, job in enumerate(small + large):
        done = _job(job)
        assert (done.state, done.attempt, done.generation) == ("succeeded", 1, 1)
        assert done.result == {"n": n, "attempt": 1}
        assert _trail(job) == [
            ("queued", "accepted", 0, 0),
            ("leased", "claimed in a batch", 1, 1),
            ("succeeded", "completed", 1, 1),
        ]
    assert sorted(job_id for job_id, _, _ in calls(calls_file)) == sorted(
        str(job.pk) for job in small + large
    )


def test_the_same_job_twice_in_one_message__delivered_once(user: Any, calls_file: str) -> None:
    job, other = _submit(user, n=1), _submit(user, n=2)

    reports = batch.execute_many([_item(job), _item(other), _item(job)])

    assert [(r.job_id, r.outcome) for r in reports] == [
        (str(job.pk), Outcome.SUCCEEDED),
        (str(other.pk), Outcome.SUCCEEDED),
    ]
    assert _runs(calls_file, job) == 1


def test_kinds_with_int_and_float_lease_lengths__share_one_message(
    user: Any, calls_file: str
) -> None:
    """A kind naming its lease as an int (30) and one as a float (0.6, or the 30.0 default)
    are packed together by the relay: the claim and the heartbeat take both."""
    mixed = [_submit(user, n=1), _submit(user, "batch.short", n=2, sleep=0.5), _submit(user, n=3)]

    assert set(_deliver(*mixed).values()) == {Outcome.SUCCEEDED}
    first = _job(mixed[0])  # 30 s lease, beaten with the 0.6 s one (every 0.2 s)
    assert first.heartbeat_at is not None and first.started_at is not None
    assert first.heartbeat_at > first.started_at


def test_a_message_naming_a_missing_job__reports_it_missing_and_runs_the_others(
    user: Any, calls_file: str
) -> None:
    job = _submit(user, n=1)
    gone = {**_item(job), "job_id": "00000000-0000-7000-8000-000000000000"}

    reports = batch.execute_many([gone, _item(job)])

    assert _outcomes(reports) == {
        gone["job_id"]: Outcome.MISSING,
        str(job.pk): Outcome.SUCCEEDED,
    }


def test_a_lease_taken_over_before_the_group_commit__only_that_job_is_fenced_out(
    user: Any, calls_file: str
) -> None:
    """The victim's handler finished; another worker took its lease over before the group
    commit: its completion matches no row (a stale write, counted), its siblings commit."""
    first, victim, third = _submit(user, n=1), _submit(user, n=2), _submit(user, n=3)
    thief = _submit(user, "batch.thief", victim=str(victim.pk))
    last = _submit(user, n=5)
    stale_before = counter_value(STALE_WRITES_REJECTED)

    outcomes = _deliver(first, victim, third, thief, last)

    assert outcomes.pop(str(victim.pk)) is Outcome.STALE
    assert set(outcomes.values()) == {Outcome.SUCCEEDED}
    assert counter_value(STALE_WRITES_REJECTED) == stale_before + 1
    taken = _job(victim)
    assert (taken.state, taken.generation, taken.lease_owner) == ("leased", 2, THIEF)
    assert taken.result is None and taken.attempt == 0  # nothing of ours was written
    assert [to for to, *_ in _trail(victim)] == ["queued", "leased"]
    assert _runs(calls_file, victim) == 1
    for job in (first, third, thief, last):
        assert (_job(job).state, _job(job).attempt) == ("succeeded", 1)


def test_a_lease_found_gone_by_the_batch_heartbeat__that_handler_stops_siblings_beat_on(
    user: Any, calls_file: str
) -> None:
    """Short leases (0.6 s): the batch heartbeat tells the victim's context its lease is gone,
    its handler stops early and writes nothing; finished siblings keep their leases alive
    until the group commit."""
    early = _submit(user, "batch.short", n=1)
    victim = _submit(user, "batch.short", n=2, sleep=20)  # works until told the lease is gone
    thief = _submit(user, "batch.thief", victim=str(victim.pk))
    late = _submit(user, "batch.short", n=4, sleep=1.0)
    stale_before = counter_value(STALE_WRITES_REJECTED)

    started = time.monotonic()
    outcomes = _deliver(early, thief, victim, late)
    elapsed = time.monotonic() - started

    assert elapsed < 15, "the victim's handler was not told its lease was gone"
    assert outcomes == {
        str(early.pk): Outcome.SUCCEEDED,
        str(thief.pk): Outcome.SUCCEEDED,
        str(victim.pk): Outcome.STALE,
        str(late.pk): Outcome.SUCCEEDED,
    }
    assert counter_value(STALE_WRITES_REJECTED) == stale_before + 1
    assert (_job(victim).generation, _job(victim).lease_owner) == (2, THIEF)
    for job in (early, late):
        done = _job(job)
        assert (done.state, done.attempt) == ("succeeded", 1)
        # Beaten after its claim: `early` finished at once and waited over a second, longer
        # than its lease, for the group commit.
        assert done.heartbeat_at is not None and done.started_at is not None
        assert done.heartbeat_at > done.started_at


def test_failures_in_a_batch__retry_charged_once_quarantine_recorded__siblings_succeed(
    user: Any, calls_file: str
) -> None:
    ok1 = _submit(user, n=1)
    flaky = _submit(user, n=2, **{"raise": "transient"})
    ok2 = _submit(user, n=3)
    broken = _submit(user, n=4, **{"raise": "permanent"})
    ok3 = _submit(user, n=5)

    outcomes = _deliver(ok1, flaky, ok2, broken, ok3)

    assert outcomes == {
        str(ok1.pk): Outcome.SUCCEEDED,
        str(flaky.pk): Outcome.RETRY_SCHEDULED,
        str(ok2.pk): Outcome.SUCCEEDED,
        str(broken.pk): Outcome.QUARANTINED,
        str(ok3.pk): Outcome.SUCCEEDED,
    }
    for job in (ok1, ok2, ok3):
        assert (_job(job).state, _job(job).attempt) == ("succeeded", 1)

    retrying = _job(flaky)
    assert (retrying.state, retrying.attempt, retrying.generation) == ("retry_wait", 1, 1)
    assert retrying.error_category == "transient"
    assert [(to, attempt) for to, _, attempt, _ in _trail(flaky)] == [
        ("queued", 0),
        ("leased", 1),
        ("retry_wait", 1),
    ]
    retry_row = OutboxEntry.objects.filter(job_id=flaky.pk).order_by("-id").first()
    assert retry_row is not None and retry_row.published_at is None
    assert OutboxEntry.objects.filter(job_id=flaky.pk).count() == 2
    assert_due_at(retry_row, retrying.next_attempt_at)

    stopped = _job(broken)
    assert (stopped.state, stopped.attempt) == ("quarantined", 1)
    record = QuarantineRecord.objects.get(job_id=broken.pk)
    assert (record.attempts, record.generation, record.category) == (1, 1, "permanent")
    assert OutboxEntry.objects.filter(job_id=broken.pk).count() == 1  # never retried


def test_jobs_needing_the_full_rules__take_the_one_job_path_charged_at_claim(
    user: Any, calls_file: str
) -> None:
    """Caps, a lease given back by the reaper (lease_expired) and a wrong kind hint: claimed
    by the one-job claim one at a time (attempt charged there); the plain sibling is still
    batch-claimed. (A keyed job that is not its key's head: the next test.)"""
    plain = _submit(user, n=0)
    capped = _submit(user, "batch.capped", n=2)
    mismatched = _submit(user, "batch.local", n=4)
    expired = _submit(user, n=3)
    # A batch claimed `expired`, then its process died: the reaper gives it back uncharged.
    spec = registry.kind_version("batch.echo", 1)
    assert spec is not None
    claimed, _, _ = batch.claim_many([(expired.pk, spec)], worker="dead:1:1")
    assert len(claimed) == 1 and _job(expired).attempt == 0
    Job.objects.filter(pk=expired.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    assert jobs_reap().retried == 1
    back = _job(expired)
    assert (back.state, back.error_category, back.attempt) == ("retry_wait", "lease_expired", 0)
    wait_until(lambda: _due(expired), timeout=10, what="the reaped job to be due")
    wrong_hint = {**_item(mismatched), "kind": "batch.echo", "kind_version": 1}

    reports = batch.execute_many([_item(plain), _item(capped), _item(expired), wrong_hint])

    assert set(_outcomes(reports).values()) == {Outcome.SUCCEEDED}
    assert _claims(plain) == [BATCH_CLAIM]
    for job in (capped, expired, mismatched):
        done = _job(job)
        assert (done.state, done.attempt) == ("succeeded", 1), job.kind
        assert _claims(job)[-1] == ONE_CLAIM
        assert _trail(job)[-1][:3] == ("succeeded", "completed", 1)
        assert _runs(calls_file, job) == 1


def test_keyed_jobs__the_head_of_a_key_is_batch_claimed_and_hands_its_key_over(
    user: Any, calls_file: str
) -> None:
    """Two keys, two jobs each. The heads share a batch claim with a plain job; their
    completion hands each key to its next job (a new outbox row, in the group commit). A
    next job delivered in the same message is not its key's head when the batch claims: it
    is set aside for the one-job path, which runs after the group commit, when its head has
    finished, so it runs then, alone, in order; its hand-over message is a duplicate."""
    plain = _submit(user, n=0)
    heads = [
        jobs.submit(kind="batch.echo", input={"n": n}, owner=user, serialization_key=f"doc:{n}")
        for n in (1, 2)
    ]
    nexts = [
        jobs.submit(kind="batch.echo", input={"n": n}, owner=user, serialization_key=f"doc:{n}")
        for n in (1, 2)
    ]
    assert not OutboxEntry.objects.filter(job_id__in=[j.pk for j in nexts]).exists()
    early = {"job_id": str(nexts[0].pk), "generation": 0, "kind": "batch.echo", "kind_version": 1}

    outcomes = _deliver_items([_item(plain), _item(heads[0]), _item(heads[1]), early])

    assert outcomes[str(plain.pk)] == Outcome.SUCCEEDED
    for head in heads:
        assert outcomes[str(head.pk)] == Outcome.SUCCEEDED
        assert _claims(head) == [BATCH_CLAIM]
        assert (_job(head).state, _job(head).attempt) == ("succeeded", 1)
    assert outcomes[str(nexts[0].pk)] == Outcome.SUCCEEDED
    assert _claims(nexts[0]) == [ONE_CLAIM]
    first_done, next_started = _job(heads[0]).finished_at, _job(nexts[0]).started_at
    assert first_done and next_started and next_started > first_done  # in key order
    for nxt in nexts:  # handed over: each next job has its message now
        assert OutboxEntry.objects.filter(job_id=nxt.pk).count() == 1

    second = _deliver(*nexts)

    assert second == {str(nexts[0].pk): Outcome.DUPLICATE, str(nexts[1].pk): Outcome.SUCCEEDED}
    assert _claims(nexts[1]) == [BATCH_CLAIM]
    for nxt in nexts:
        assert _runs(calls_file, nxt) == 1


def test_the_same_batch_message_twice__the_second_is_a_duplicate_with_no_new_effects(
    user: Any, calls_file: str
) -> None:
    batch_jobs = [_submit(user, "batch.effect", n=n) for n in range(3)]
    batch_jobs += [_submit(user, n=n) for n in range(2)]
    items = [_item(job) for job in batch_jobs]
    first = _outcomes(batch.execute_many(items))
    assert set(first.values()) == {Outcome.SUCCEEDED}
    events = JobEvent.objects.count()
    ledger = list(EffectLedgerEntry.objects.order_by("id").values_list("id", "state", "calls"))
    lines = Path(calls_file).read_text()
    duplicates = counter_value(DUPLICATE_DELIVERIES)

    again = _outcomes(batch.execute_many(items))

    assert again == {str(job.pk): Outcome.DUPLICATE for job in batch_jobs}
    assert JobEvent.objects.count() == events
    assert list(EffectLedgerEntry.objects.order_by("id").values_list("id", "state", "calls")) == (
        ledger
    )
    assert Path(calls_file).read_text() == lines
    assert counter_value(DUPLICATE_DELIVERIES) == duplicates + len(batch_jobs)


def test_budget_spent__later_jobs_released_uncharged__then_succeed_when_delivered_again(
    user: Any, calls_file: str, settings: Any
) -> None:
    settings.JOBS_BATCH_BUDGET_SECONDS = 0.3
    slow = _submit(user, n=0, sleep=0.8)
    rest = [_submit(user, n=n) for n in (1, 2)]

    outcomes = _deliver(slow, *rest)

    assert outcomes == {
        str(slow.pk): Outcome.SUCCEEDED,
        **{str(job.pk): Outcome.DEFERRED for job in rest},
    }
    assert (_job(slow).state, _job(slow).attempt) == ("succeeded", 1)
    for job in rest:
        released = _job(job)
        assert (released.state, released.attempt, released.generation) == ("retry_wait", 0, 1)
        assert released.next_attempt_at is not None
        assert released.next_attempt_at <= timezone.now()
        assert _trail(job)[-1] == ("retry_wait", "released unstarted: batch budget spent", 0, 1)
        assert _runs(calls_file, job) == 0
        rows = OutboxEntry.objects.filter(job_id=job.pk).order_by("id")
        assert rows.count() == 2  # the submission's, and the release's, due now
        newest = rows.last()
        assert newest is not None and newest.available_at <= timezone.now()

    redelivered = _deliver(*rest)

    assert set(redelivered.values()) == {Outcome.SUCCEEDED}
    for job in rest:
        done = _job(job)
        assert (done.state, done.attempt, done.generation) == ("succeeded", 1, 2)
        assert _claims(job) == [BATCH_CLAIM, BATCH_CLAIM]
        assert _runs(calls_file, job) == 1


def test_external_effects_in_batches__applied_once_per_job_across_retries(
    user: Any, calls_file: str
) -> None:
    """Two jobs fail after their effect; delivered again (in a batch) they reuse the ledger
    row: one call of the effect per job in all."""
    steady = [_submit(user, "batch.effect", n=n) for n in range(3)]
    flaky = [_submit(user, "batch.effect", n=n, fail_times=1) for n in (3, 4)]
    reused = counter_value(EFFECTS_REUSED)

    first = _deliver(*steady, *flaky)

    assert {first[str(job.pk)] for job in steady} == {Outcome.SUCCEEDED}
    assert {first[str(job.pk)] for job in flaky} == {Outcome.RETRY_SCHEDULED}
    wait_until(
        lambda: all(_due(job) for job in flaky),
        timeout=10,
        what="the retries to be due",
    )
    second = _deliver(*flaky)

    assert set(second.values()) == {Outcome.SUCCEEDED}
    for job in steady + flaky:
        assert _job(job).state == "succeeded"
        entry = EffectLedgerEntry.objects.get(job_id=job.pk, name="notice")
        assert (entry.state, entry.calls, entry.local) == ("applied", 1, False)
        assert _job(job).result == {"notice": entry.outcome}
    effect_calls = [job_id for job_id, _, _ in calls(calls_file, "effect")]
    assert sorted(effect_calls) == sorted(str(job.pk) for job in steady + flaky)
    assert [attempt for job_id, _, attempt in calls(calls_file) if job_id == str(flaky[0].pk)] == [
        1,
        2,
    ]
    assert counter_value(EFFECTS_REUSED) == reused + len(flaky)


def test_local_effects_commit_in_their_savepoint__a_fenced_out_one_rolls_back_alone(
    user: Any, calls_file: str
) -> None:
    first = _submit(user, "batch.local", n=1)
    victim = _submit(user, "batch.local", n=2)
    thief = _submit(user, "batch.thief", victim=str(victim.pk))
    last = _submit(user, "batch.local", n=3)
    stale_before = counter_value(STALE_WRITES_REJECTED)

    outcomes = _deliver(first, victim, thief, last)

    assert outcomes.pop(str(victim.pk)) is Outcome.STALE
    assert set(outcomes.values()) == {Outcome.SUCCEEDED}
    assert counter_value(STALE_WRITES_REJECTED) == stale_before + 1
    for job in (first, last):
        assert _job(job).state == "succeeded"
        entry = EffectLedgerEntry.objects.get(job_id=job.pk, name="receipt")
        assert (entry.state, entry.local, entry.outcome) == (
            "applied",
            True,
            {"receipt": entry.idempotency_key},
        )
    assert not EffectLedgerEntry.objects.filter(job_id=victim.pk).exists()
    assert (_job(victim).state, _job(victim).lease_owner) == ("leased", THIEF)


def test_a_pending_cancel_request__honoured_in_a_batch_without_running_the_handler(
    user: Any, calls_file: str
) -> None:
    """A job given back with a cancel request still pending (here: released by a worker
    that lacked its kind version) is cancelled on its next delivery, as the one-job path
    does, not run."""
    job = _submit(user, n=1)
    sibling = _submit(user, n=2)
    lease = job_claim(_job(job), worker="old:1:1")
    assert lease is not None
    job_cancel(job_id=job.pk, actor="alice")
    lifecycle.job_release_incompatible(lease, delay=0)
    waiting = _job(job)
    assert waiting.state == "retry_wait" and waiting.cancel_requested_at is not None

    outcomes = _deliver(job, sibling)

    assert outcomes == {str(job.pk): Outcome.CANCELLED, str(sibling.pk): Outcome.SUCCEEDED}
    cancelled = _job(job)
    assert (cancelled.state, cancelled.attempt) == ("cancelled", 0)
    assert _runs(calls_file, job) == 0
    assert _trail(job)[-1][:3] == ("cancelled", "cancelled before this attempt started", 0)


def test_real_worker__relay_packs_batch_messages__every_job_succeeds_exactly_once(
    harness: Harness, user: Any, tmp_path: Path
) -> None:
    """45 committed rows, one relay sweep: three `jobs.execute_many` messages of 15 for a
    real worker. Three jobs fail once and come back through their own retry rows."""
    calls_path = str(tmp_path / "worker-calls.txt")
    flaky = {5, 20, 38}
    requests = [
        {
            "kind": "batch.echo",
            "owner": user,
            "input": {"n": n, "raise": "transient", "fail_times": 1} if n in flaky else {"n": n},
        }
        for n in range(45)
    ]
    submitted = job_submit_many(requests)
    assert OutboxEntry.objects.filter(reserved_until__isnull=True).count() == 45
    # Both know the kinds: the relay packs only kinds it knows to be batchable.
    worker = harness.start_worker(
        "wb",
        concurrency=2,
        JOBS_HANDLER_MODULES="tests.kinds_batch",
        JOBS_TEST_CALLS_FILE=calls_path,
    )
    harness.start_relay(JOBS_HANDLER_MODULES="tests.kinds_batch")

    wait_until(
        lambda: Job.objects.filter(state="succeeded").count() == 45,
        timeout=90,
        what="every job to succeed",
    )

    assert "jobs.execute_many" in worker.log()
    runs = calls(calls_path)
    for n, job in enumerate(submitted):
        done = _job(job)
        expected_attempt = 2 if n in flaky else 1
        assert done.attempt == expected_attempt, n
        assert done.result == {"n": n, "attempt": expected_attempt}
        assert [a for job_id, _, a in runs if job_id == str(job.pk)] == list(
            range(1, expected_attempt + 1)
        )
        assert _claims(job)[0] == BATCH_CLAIM  # the first delivery was a batch message
        assert [to for to, *_ in _trail(job)].count("succeeded") == 1
    wait_until(
        lambda: not OutboxEntry.objects.filter(published_at__isnull=True).exists(),
        timeout=30,
        what="every outbox row to be marked published",
    )


def test_a_local_effect_failing_in_the_group_commit__fails_that_job_alone(
    user: Any, calls_file: str
) -> None:
    """The local effect runs inside the group commit; when it raises, its savepoint rolls
    back and that job fails as if its handler had (a transient error: a retry, charged);
    its siblings' outcomes commit in the same transaction."""
    broken = _submit(user, "batch.local", n=0, broken=True)
    fine = [_submit(user, "batch.local", n=n) for n in (1, 2)]

    outcomes = _deliver(fine[0], broken, fine[1])

    assert outcomes[str(broken.pk)] == Outcome.RETRY_SCHEDULED
    failed = _job(broken)
    assert (failed.state, failed.attempt, failed.error_category) == ("retry_wait", 1, "transient")
    assert not EffectLedgerEntry.objects.filter(job_id=broken.pk).exists()  # rolled back
    for job in fine:
        assert outcomes[str(job.pk)] == Outcome.SUCCEEDED
        assert (_job(job).state, _job(job).attempt) == ("succeeded", 1)
        assert EffectLedgerEntry.objects.get(job_id=job.pk, name="receipt").state == "applied"


def test_jobs_set_aside_once_the_budget_is_spent__get_a_message_again_not_a_run(
    user: Any, calls_file: str, settings: Any
) -> None:
    """A slow job spends the budget; the set-aside jobs (here: a kind with caps, so the
    one-job path) are not run past it: each gets a new outbox row, then runs later."""
    settings.JOBS_BATCH_BUDGET_SECONDS = 0.3
    slow = _submit(user, n=0, sleep=0.6)
    keyed = [_submit(user, "batch.capped", n=n) for n in (1, 2)]
    before = {job.pk: OutboxEntry.objects.filter(job_id=job.pk).count() for job in keyed}

    outcomes = _deliver(slow, *keyed)

    assert outcomes[str(slow.pk)] == Outcome.SUCCEEDED
    for job in keyed:
        assert outcomes[str(job.pk)] == Outcome.DEFERRED
        assert (_job(job).state, _job(job).attempt, _job(job).generation) == ("queued", 0, 0)
        assert _runs(calls_file, job) == 0
        assert OutboxEntry.objects.filter(job_id=job.pk).count() == before[job.pk] + 1

    settings.JOBS_BATCH_BUDGET_SECONDS = 5.0
    again = _deliver(*keyed)

    assert set(again.values()) == {Outcome.SUCCEEDED}
    for job in keyed:
        assert (_job(job).state, _job(job).attempt) == ("succeeded", 1)
        assert _runs(calls_file, job) == 1


def test_a_key_leased_concurrently_during_the_batch_claim__the_message_falls_back_to_one_by_one(
    user: Any, calls_file: str
) -> None:
    """The batch claim's snapshot shows `head` as its key's head, but another transaction is
    leasing a sibling of the key: the unique index (one leased job per key) refuses the
    batch statement once that transaction commits. Nothing is lost: the batch claims
    nothing and every job of the message goes to the one-job path, which claims the plain
    job and leaves `head` waiting (its key is held)."""
    import threading

    from django.db import connections

    plain = _submit(user, n=0)
    head = jobs.submit(kind="batch.echo", input={"n": 1}, owner=user, serialization_key="doc:r")
    sibling = jobs.submit(kind="batch.echo", input={"n": 2}, owner=user, serialization_key="doc:r")
    items = [_item(plain), _item(head)]
    leased = threading.Event()
    commit = threading.Event()

    def lease_the_sibling() -> None:
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute(
                    "UPDATE jobs_job SET state = 'leased', generation = generation + 1, "
                    "lease_owner = 'other:1:1', lease_until = now() + interval '1 minute' "
                    "WHERE id = %s",
                    [sibling.pk],
                )
                leased.set()
                assert commit.wait(30)
                cursor.execute("COMMIT")
        finally:
            other.close()

    thread = threading.Thread(target=lease_the_sibling)
    thread.start()
    assert leased.wait(30)

    def commit_once_the_claim_waits() -> None:
        """The batch claim waits on the uncommitted sibling in the unique index: seen in
        pg_stat_activity, then the other transaction commits."""
        watcher = connections.create_connection("default")
        try:
            wait_until(lambda: _claim_waiting_on_a_lock(watcher), timeout=30, what="the claim")
        finally:
            watcher.close()
            commit.set()

    watch = threading.Thread(target=commit_once_the_claim_waits)
    watch.start()
    try:
        outcomes = _deliver_items(items)
    finally:
        watch.join(30)
        commit.set()
        thread.join(30)

    assert outcomes[str(plain.pk)] == Outcome.SUCCEEDED
    assert _claims(plain) == [ONE_CLAIM]  # claimed one by one after the refusal
    assert outcomes[str(head.pk)] == Outcome.DEFERRED
    assert (_job(head).state, _job(head).generation, _runs(calls_file, head)) == ("queued", 0, 0)
    assert _job(sibling).state == "leased"


def _claim_waiting_on_a_lock(conn: Any) -> bool:
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s AND pid <> pg_backend_pid()",
            ["%jobs_claim_many%"],
        )
        row = cursor.fetchone()
    return bool(row and row[0])
