"""Keyed jobs in a batch: the heads' successes complete and hand their keys over in the group
commit's one completion statement (jobs_complete_many_hand_over), each still fenced on its own."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

import jobs
import tests.kinds_batch  # noqa: F401  (registers the batch kinds in this process too)
from jobs import batch, registry
from jobs.counters import STALE_WRITES_REJECTED, counter_value
from jobs.models import Job, JobEvent
from jobs.runtime import ExecutionReport, Outcome
from outbox.models import OutboxEntry
from tests.harness import wait_until
from tests.kinds_batch import THIEF, calls

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _rows_stay_in_the_outbox(settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False


def _keyed(user: Any, key: str, kind: str = "batch.echo", **input: Any) -> Job:
    return jobs.submit(kind=kind, input=input, owner=user, serialization_key=key)


def _item(job: Job) -> dict[str, Any]:
    row = OutboxEntry.objects.filter(job_id=job.pk).order_by("-id").first()
    assert row is not None, f"job {job.pk} has no outbox row"
    return dict(row.kwargs)


def _outcomes(reports: list[ExecutionReport]) -> dict[str, Outcome]:
    return {report.job_id: report.outcome for report in reports}


def _job(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def _messages(job: Job) -> int:
    return OutboxEntry.objects.filter(job_id=job.pk).count()


def _batch_statements(items: list[dict[str, Any]]) -> tuple[dict[str, Outcome], list[str]]:
    with CaptureQueriesContext(connection) as captured:
        outcomes = _outcomes(batch.execute_many(items))
    return outcomes, [query["sql"] for query in captured.captured_queries]


def test_keyed_heads__complete_and_hand_over_in_one_statement__no_savepoint_per_job(
    user: Any, calls_file: str
) -> None:
    """Heads of 2 and of 8 keys (each with a next job) plus a plain job: one claim, one
    completion statement, one INSERT for the next heads' messages; the statements do not
    grow with the number of keys, and no savepoint is taken."""
    few = [_keyed(user, f"few:{n}", n=n) for n in range(2)]
    many = [_keyed(user, f"many:{n}", n=n) for n in range(8)]
    nexts = [_keyed(user, f"few:{n}", n=n) for n in range(2)]
    nexts += [_keyed(user, f"many:{n}", n=n) for n in range(8)]
    plain = [jobs.submit(kind="batch.echo", input={"n": n}, owner=user) for n in range(2)]
    assert not any(_messages(nxt) for nxt in nexts)

    few_outcomes, few_sqls = _batch_statements([_item(j) for j in [*few, plain[0]]])
    many_outcomes, many_sqls = _batch_statements([_item(j) for j in [*many, plain[1]]])

    for sqls in (few_sqls, many_sqls):
        assert sum("jobs_claim_many(" in sql for sql in sqls) == 1, sqls
        assert sum("jobs_complete_many_hand_over(" in sql for sql in sqls) == 1, sqls
        assert not [sql for sql in sqls if "SAVEPOINT" in sql.upper()], sqls
        assert not [sql for sql in sqls if "jobs_admission_lock(" in sql], sqls
        assert sum('INSERT INTO "outbox_outboxentry"' in sql for sql in sqls) == 1, sqls
    assert len(many_sqls) == len(few_sqls), many_sqls
    assert set(few_outcomes.values()) == set(many_outcomes.values()) == {Outcome.SUCCEEDED}
    for head in [*few, *many, *plain]:
        done = _job(head)
        assert (done.state, done.attempt, done.generation) == ("succeeded", 1, 1)
    for nxt in nexts:  # handed over: exactly one message each, still queued
        assert (_job(nxt).state, _messages(nxt)) == ("queued", 1)

    second = _outcomes(batch.execute_many([_item(nxt) for nxt in nexts]))

    assert set(second.values()) == {Outcome.SUCCEEDED}
    for job in [*few, *many, *nexts]:
        assert len([row for row in calls(calls_file) if row[0] == str(job.pk)]) == 1
    for head, nxt in zip([*few, *many], nexts, strict=True):
        started, finished = _job(nxt).started_at, _job(head).finished_at
        assert started is not None and finished is not None and started > finished  # key order


def test_a_keyed_head_whose_lease_was_taken_over__fenced_out_alone__its_key_not_handed_over(
    user: Any, calls_file: str
) -> None:
    """The victim's lease is taken over before the group commit: its completion matches no
    row, its key stays with the new owner (its next job gets no message from us); the other
    key's head completes and hands over in the same statement."""
    victim = _keyed(user, "v", n=1)
    victim_next = _keyed(user, "v", n=2)
    other = _keyed(user, "o", n=3)
    other_next = _keyed(user, "o", n=4)
    thief = jobs.submit(kind="batch.thief", input={"victim": str(victim.pk)}, owner=user)
    stale_before = counter_value(STALE_WRITES_REJECTED)

    outcomes = _outcomes(batch.execute_many([_item(j) for j in (victim, other, thief)]))

    assert outcomes == {
        str(victim.pk): Outcome.STALE,
        str(other.pk): Outcome.SUCCEEDED,
        str(thief.pk): Outcome.SUCCEEDED,
    }
    assert counter_value(STALE_WRITES_REJECTED) == stale_before + 1
    taken = _job(victim)
    assert (taken.state, taken.lease_owner, taken.result) == ("leased", THIEF, None)
    assert _messages(victim_next) == 0
    assert (_job(other).state, _messages(other_next)) == ("succeeded", 1)


def _waiting_on_an_advisory_lock(conn: Any) -> bool:
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND wait_event = 'advisory' AND query LIKE %s AND pid <> pg_backend_pid()",
            ["%jobs_complete_many_hand_over%"],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def test_a_submit_holding_the_key_during_the_group_commit__its_job_gets_the_key(
    user: Any, calls_file: str
) -> None:
    """A submission of the key runs while the head is leased: it takes the key's lock, finds
    the head busy and writes no message. The group commit's hand-over waits on that lock;
    once the submission commits, the hand-over sees its job (a fresh snapshot after the
    lock) and gives it the key's message: nothing is stranded."""
    head = _keyed(user, "s", n=1)
    claimed, _, _ = batch.claim_many(
        [(head.pk, registry.kind_latest("batch.echo"))], worker="w:1:1"
    )
    assert [c.lease.job_id for c in claimed] == [head.pk]
    batch.run_claimed(claimed)
    submitted: list[Job] = []
    holding = threading.Event()
    release = threading.Event()

    def submit_holding_the_key() -> None:
        try:
            with transaction.atomic():
                submitted.append(_keyed(user, "s", n=2))
                holding.set()
                assert release.wait(30)
        finally:
            connection.close()

    def release_once_the_hand_over_waits() -> None:
        watcher = connections.create_connection("default")
        try:
            wait_until(
                lambda: _waiting_on_an_advisory_lock(watcher), timeout=30, what="the hand-over"
            )
        finally:
            watcher.close()
            release.set()

    submitter = threading.Thread(target=submit_holding_the_key)
    submitter.start()
    assert holding.wait(30)
    watch = threading.Thread(target=release_once_the_hand_over_waits)
    watch.start()
    try:
        batch.group_commit(claimed)
    finally:
        release.set()
        watch.join(30)
        submitter.join(30)

    [nxt] = submitted
    assert _job(head).state == "succeeded"
    assert (_job(nxt).state, _messages(nxt)) == ("queued", 1)
    assert JobEvent.objects.filter(job_id=nxt.pk, reason="accepted").count() == 1


def _submit_waiting_on_the_key(conn: Any) -> bool:
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND wait_event = 'advisory' AND query LIKE %s AND pid <> pg_backend_pid()",
            ["%jobs_admission_lock%"],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def test_a_keyed_submit_waiting_on_the_hand_over__sees_the_head_done_and_gets_its_message(
    user: Any, calls_file: str
) -> None:
    """A keyed submit is one statement (jobs.admission.insert_admitted). When it arrives while
    a group commit that completes the key's head holds the key's lock, it waits; the hand-over
    found no next head (the submit had not committed), so the submit's own admission check
    must see the head done once the lock is free (a snapshot taken after the lock, not at
    the statement's start), or the job would be stranded without a message."""
    head = _keyed(user, "s2", n=1)
    claimed, _, _ = batch.claim_many(
        [(head.pk, registry.kind_latest("batch.echo"))], worker="w:1:1"
    )
    batch.run_claimed(claimed)
    submitted: list[Job] = []

    def submit_keyed() -> None:
        try:
            submitted.append(_keyed(user, "s2", n=2))
        finally:
            connection.close()

    submitter = threading.Thread(target=submit_keyed)
    watcher = connections.create_connection("default")
    try:
        with transaction.atomic():  # the group commit's transaction stays open, its locks held
            batch.group_commit(claimed)
            submitter.start()
            wait_until(
                lambda: _submit_waiting_on_the_key(watcher), timeout=30, what="the keyed submit"
            )
    finally:
        watcher.close()
        submitter.join(30)

    [nxt] = submitted
    assert _job(head).state == "succeeded"
    assert (_job(nxt).state, _messages(nxt)) == ("queued", 1)
