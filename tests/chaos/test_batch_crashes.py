"""The batch path under real crashes: killed `jobs.execute_many` workers and relays.

Batch messages come from `jobs.submit_many` (its rows are published after the commit,
packed by outbox.batching) or from a relay sweep with the fast path off. Workers are real
`celery worker` processes running tests/kinds_batch_chaos.py (2 s leases); the test
process runs the reaper in a polling loop (what beat does every JOBS_REAP_INTERVAL), and a
relay process publishes the retries it schedules. Side channels (tests/kinds_batch_chaos)
count handler starts and effect calls per process, outside the database under test.

Invariants checked in every test: each job ends in exactly one committed outcome (one
terminal event), no external effect is called twice for one key unless the ledger began it
twice, a message is acked only after its outcomes committed, and attempts are charged only
to jobs whose handler started in a charged claim (a batch claim charges nothing until its
group commit; a killed batch's jobs come back uncharged and then run alone, charged).
"""

from __future__ import annotations

import base64
import json
import os
import signal
from collections import Counter
from typing import Any

import pytest
import redis

import jobs
import tests.kinds_batch_chaos  # noqa: F401  (registers the kinds in this process too)
from demo.procs import process_alive
from jobs.counters import (
    DUPLICATE_DELIVERIES,
    DUPLICATE_EFFECTS,
    EFFECTS_REUSED,
    counter_value,
)
from jobs.effects import effect_idempotency_key
from jobs.models import EffectLedgerEntry, Job, JobEvent, QuarantineRecord
from jobs.reaper import jobs_reap
from outbox.models import OutboxEntry
from tests.harness import Harness, Proc, queue_envelopes, wait_until
from tests.kinds_batch_chaos import EFFECT_NAME, EFFECTS, LOG_DIR_ENV, STARTS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

KINDS = "tests.kinds_batch_chaos"
FINISHED = ("succeeded", "failed", "cancelled", "quarantined")


# -- the world ---------------------------------------------------------------------------


def worker_env(harness: Harness, **extra: str) -> dict[str, Any]:
    """The environment of a worker running the batch kinds (typed Any to pass as **)."""
    return {"JOBS_HANDLER_MODULES": KINDS, LOG_DIR_ENV: str(harness.workdir), **extra}


def start_relay(harness: Harness, **extra: str) -> Proc:
    """A relay that knows the kinds, so it packs their rows into batch messages."""
    env: dict[str, Any] = {"JOBS_HANDLER_MODULES": KINDS, **extra}
    return harness.start_relay(**env)


def submit_batch(user: Any, inputs: list[tuple[str, dict[str, Any]]]) -> list[Job]:
    """Plain requests in one `submit_many`: one transaction, batch messages after commit."""
    return jobs.submit_many(
        [{"kind": kind, "input": payload, "owner": user} for kind, payload in inputs]
    )


def steps(count: int, **payload: float) -> list[tuple[str, dict[str, Any]]]:
    return [("bchaos.step", dict(payload)) for _ in range(count)]


def broker_messages(harness: Harness, queue: str = "jobs") -> list[tuple[str, list[str]]]:
    """(task name, job ids) of every message waiting in the private Redis queue, oldest
    first (kombu pushes to the head of the list)."""
    client = redis.Redis.from_url(harness.broker_url)
    try:
        raw = queue_envelopes(client, queue)
    finally:
        client.close()
    messages = []
    for item in raw:
        message = json.loads(item)
        kwargs = json.loads(base64.b64decode(message["body"]))[1]
        items = kwargs.get("items", [kwargs])
        messages.append((message["headers"]["task"], [i["job_id"] for i in items]))
    return messages


def waiting_task_ids(harness: Harness, queue: str = "jobs") -> list[str]:
    """The Celery task id of every message waiting in the queue, oldest first."""
    client = redis.Redis.from_url(harness.broker_url)
    try:
        raw = queue_envelopes(client, queue)
    finally:
        client.close()
    return [json.loads(item)["headers"]["id"] for item in raw]


def unacked_task_ids(harness: Harness) -> list[str]:
    """The task ids of messages delivered to a consumer and not acked (kombu's `unacked`
    hash: delivery tag -> [message, exchange, routing key])."""
    client = redis.Redis.from_url(harness.broker_url)
    try:
        raw = client.hvals("unacked")
    finally:
        client.close()
    return [json.loads(item)[0]["headers"]["id"] for item in raw]


def deliveries(worker: Proc, task_id: str) -> int:
    """How many times `worker` received the message `task_id` (Celery logs each receipt)."""
    return worker.log().count(f"[{task_id}] received")


def side_channel(harness: Harness, name: str) -> list[list[str]]:
    path = harness.workdir / name
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def starts_by_job(harness: Harness) -> Counter[str]:
    return Counter(line[0] for line in side_channel(harness, STARTS))


def effect_calls_by_key(harness: Harness) -> Counter[str]:
    return Counter(line[0] for line in side_channel(harness, EFFECTS))


def mark_key(job: Job) -> str:
    return effect_idempotency_key(job_id=job.pk, input_version=job.input_version, name=EFFECT_NAME)


def rows(batch: list[Job]) -> list[Job]:
    """The jobs of `batch` as stored now, in the order given (the order of the batch)."""
    stored = Job.objects.in_bulk([j.pk for j in batch])
    return [stored[j.pk] for j in batch]


def all_in(batch: list[Job], states: tuple[str, ...]) -> bool:
    return not Job.objects.filter(pk__in=[j.pk for j in batch]).exclude(state__in=states).exists()


def reap_until_finished(batch: list[Job], *, timeout: float = 90) -> None:
    """Run the reaper (as beat does) until every job of `batch` is finished."""

    def finished() -> bool:
        jobs_reap()
        return all_in(batch, FINISHED)

    wait_until(finished, timeout=timeout, interval=0.3, what="every job to finish")


# -- the invariants ----------------------------------------------------------------------


def assert_one_outcome_each(batch: list[Job], state: str = "succeeded") -> None:
    """Every job ended in `state`, with exactly one terminal event, and its trail's last
    event is that state."""
    for job in rows(batch):
        assert job.state == state, (job.pk, job.state, job.error_message)
        terminal = JobEvent.objects.filter(job=job, to_state__in=FINISHED)
        assert list(terminal.values_list("to_state", flat=True)) == [state], job.pk
        last = JobEvent.objects.filter(job=job).order_by("-id").first()
        assert last is not None and last.to_state == state


def assert_effects_once(harness: Harness, batch: list[Job]) -> dict[str, EffectLedgerEntry]:
    """One applied ledger row per job; the side channel saw each key called, and never
    more often than the ledger began it (a second call is only ever the same logical send
    after a crash between the call and its record); never a duplicate effect."""
    calls = effect_calls_by_key(harness)
    entries = {}
    for job in rows(batch):
        (entry,) = EffectLedgerEntry.objects.filter(job=job, name=EFFECT_NAME)
        assert entry.state == "applied" and entry.idempotency_key == mark_key(job)
        assert 1 <= calls[entry.idempotency_key] <= entry.calls, (job.pk, calls, entry.calls)
        entries[str(job.pk)] = entry
    assert set(calls) <= {mark_key(job) for job in batch}
    assert counter_value(DUPLICATE_EFFECTS) == 0
    return entries


def assert_claimed_in_one_batch(batch: list[Job], *, generation: int = 1) -> None:
    """Every job of `batch` was leased by the same batch claim (one owner token)."""
    claims = JobEvent.objects.filter(
        job_id__in=[j.pk for j in batch], to_state="leased", reason="claimed in a batch"
    )
    assert claims.count() == len(batch)
    assert set(claims.values_list("generation", flat=True)) == {generation}
    assert len(set(claims.values_list("worker", flat=True))) == 1


# -- the tests ---------------------------------------------------------------------------


def test_batch_killed_after_claim_before_any_handler(harness: Harness, user: Any) -> None:
    """A worker dies right after its batch claim: nothing was charged, no handler ran; the
    reaper gives the jobs back uncharged and each runs once, alone, as attempt 1."""
    batch = submit_batch(user, steps(5))
    assert broker_messages(harness) == [("jobs.execute_many", [str(j.pk) for j in batch])]
    (message,) = waiting_task_ids(harness)
    # Solo pool: the worker process itself runs the batch, so the failpoint kills it all.
    # It dies on its first message, which is waiting: do not wait for it to look ready.
    first = harness.start_worker(
        "w1",
        pool="solo",
        wait=False,
        **worker_env(harness, JOBS_FAILPOINTS="worker.batch_after_claim=exit"),
    )

    wait_until(lambda: not first.alive(), timeout=60, what="worker 1 to die after its claim")
    assert first.popen.returncode == 137
    assert "failpoint worker.batch_after_claim triggered" in first.log()
    for job in rows(batch):
        assert (job.state, job.generation, job.attempt) == ("leased", 1, 0)
    assert_claimed_in_one_batch(batch)
    assert starts_by_job(harness) == {}
    assert unacked_task_ids(harness) == [message]  # never acked: nothing had committed

    start_relay(harness)
    harness.start_worker("w2", **worker_env(harness))
    reap_until_finished(batch)

    assert_one_outcome_each(batch)
    starts = starts_by_job(harness)
    for job in rows(batch):
        assert (job.generation, job.attempt) == (2, 1)  # the killed claim cost nothing
        assert starts[str(job.pk)] == 1
        reaped = JobEvent.objects.get(job=job, from_state="leased", to_state="retry_wait")
        assert reaped.details["category"] == "lease_expired"
        assert reaped.generation == 1 and reaped.attempt == 0
        second = JobEvent.objects.get(job=job, to_state="leased", generation=2)
        assert second.reason == "claimed" and second.attempt == 1  # alone, charged
        assert second.worker.startswith("w2:")
    assert_effects_once(harness, batch)


def test_batch_killed_with_half_the_handlers_done(harness: Harness, user: Any) -> None:
    """SIGKILL of the pool child once half the batch's handlers applied their effect: nothing
    was committed but the ledger; on recovery each job runs once more, alone and charged,
    and the effects already applied are reused, never called again."""
    batch = submit_batch(user, steps(6, before=0.4, after=0.4))
    assert broker_messages(harness) == [("jobs.execute_many", [str(j.pk) for j in batch])]
    (message,) = waiting_task_ids(harness)
    half = len(batch) // 2
    # A budget past the whole batch: every handler is meant to start in the first run.
    worker = harness.start_worker("w1", **worker_env(harness, JOBS_BATCH_BUDGET_SECONDS="60"))
    child = worker.pool_child()

    def half_applied() -> bool:
        # Recorded on the side channel and ledgered as applied: the kill then lands in the
        # sleep after an effect or before the next one, not inside a call.
        return (
            len(side_channel(harness, EFFECTS)) >= half
            and EffectLedgerEntry.objects.filter(
                job_id__in=[j.pk for j in batch], state="applied"
            ).count()
            >= half
        )

    wait_until(half_applied, timeout=60, interval=0.02, what="half the handlers' effects")
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: not process_alive(child), timeout=30, what="the pool child to die")

    applied_before = {
        str(job_id)
        for job_id in EffectLedgerEntry.objects.filter(
            job_id__in=[j.pk for j in batch], state="applied"
        ).values_list("job_id", flat=True)
    }
    assert half <= len(applied_before) < len(batch)
    for job in rows(batch):
        assert (job.state, job.generation, job.attempt) == ("leased", 1, 0)  # nothing committed
    assert_claimed_in_one_batch(batch)

    start_relay(harness)
    reap_until_finished(batch)

    assert_one_outcome_each(batch)
    entries = assert_effects_once(harness, batch)
    calls = effect_calls_by_key(harness)
    starts = starts_by_job(harness)
    reran_unapplied = 0
    for job in rows(batch):
        key = str(job.pk)
        # Siblings charged once each: the killed batch claim charged nobody.
        assert (job.attempt, job.generation) == (1, 2)
        charged = JobEvent.objects.get(job=job, to_state="leased", generation=2)
        assert charged.reason in ("claimed", "took over expired lease") and charged.attempt == 1
        if key in applied_before:
            # Applied before the kill: reused by the second run, not called again.
            assert (calls[mark_key(job)], entries[key].calls, entries[key].generation) == (1, 1, 1)
            assert starts[key] == 2
        else:
            assert starts[key] in (1, 2)
            reran_unapplied += starts[key] == 2
    assert reran_unapplied <= 1  # at most the handler the kill interrupted before its effect
    assert counter_value(EFFECTS_REUSED) >= len(applied_before)
    assert worker.alive() and worker.children() != [child]  # the pool replaced its child
    wait_until(harness.broker_idle, timeout=30, what="every message acked")
    # The killed run had not acked its message: it was rejected back and delivered again.
    assert deliveries(worker, message) == 2


def test_batch_killed_after_group_commit_before_ack(harness: Harness, user: Any) -> None:
    """The pool child dies after the group commit, before the ack: the message comes back
    to a fresh child, which finds every job finished, counts duplicates and acks; nothing
    runs twice."""
    batch = submit_batch(user, steps(5))
    assert broker_messages(harness) == [("jobs.execute_many", [str(j.pk) for j in batch])]
    (message,) = waiting_task_ids(harness)
    worker = harness.start_worker(
        "w1", **worker_env(harness, JOBS_FAILPOINTS="worker.after_complete_before_ack=exit")
    )
    children = worker.children()

    wait_until(
        lambda: counter_value(DUPLICATE_DELIVERIES) == len(batch),
        timeout=60,
        what="the redelivered batch to be counted as duplicates",
    )
    wait_until(harness.broker_idle, timeout=30, what="the redelivery to be acked")

    assert "failpoint worker.after_complete_before_ack triggered" in worker.log()
    assert worker.alive() and worker.children() != children  # a new child took the message
    assert deliveries(worker, message) == 2  # not acked before the kill: delivered again
    assert_one_outcome_each(batch)
    assert_claimed_in_one_batch(batch)
    entries = assert_effects_once(harness, batch)
    assert starts_by_job(harness) == {str(j.pk): 1 for j in batch}  # nothing re-ran
    for job in rows(batch):
        assert (job.generation, job.attempt) == (1, 1)
        assert JobEvent.objects.filter(job=job, to_state="leased").count() == 1
        assert entries[str(job.pk)].calls == 1
    assert counter_value(DUPLICATE_DELIVERIES) == len(batch)


def test_relay_killed_after_batch_publish_before_mark(
    harness: Harness, user: Any, settings: Any
) -> None:
    """A relay publishes batch messages and dies before marking their rows; once the
    reservation lapses a second relay publishes them again; every job still runs once."""
    settings.OUTBOX_FAST_PATH = False  # only the relays publish
    batch = submit_batch(user, steps(8))
    ids = {str(j.pk) for j in batch}
    entries = OutboxEntry.objects.filter(job_id__in=[j.pk for j in batch])
    assert entries.count() == len(batch)
    assert not entries.filter(reserved_until__isnull=False).exists()
    assert broker_messages(harness) == []

    relay_env = {"OUTBOX_RESERVATION_SECONDS": "1", "OUTBOX_BATCH_MAX": "3"}
    doomed = start_relay(
        harness, JOBS_FAILPOINTS="relay.after_publish_before_mark=exit", **relay_env
    )
    wait_until(lambda: not doomed.alive(), timeout=60, what="the relay to die at its failpoint")
    assert doomed.popen.returncode == 137
    first = broker_messages(harness)
    assert [(task, len(job_ids)) for task, job_ids in first] == [
        ("jobs.execute_many", 3),
        ("jobs.execute_many", 3),
        ("jobs.execute_many", 2),
    ]
    assert Counter(i for _, job_ids in first for i in job_ids) == dict.fromkeys(ids, 1)
    assert not entries.filter(published_at__isnull=False).exists()

    start_relay(harness, **relay_env)
    wait_until(
        lambda: not entries.filter(published_at__isnull=True).exists(),
        timeout=60,
        what="a second relay to publish the rows again",
    )
    both = broker_messages(harness)
    assert {task for task, _ in both} == {"jobs.execute_many"}
    assert Counter(i for _, job_ids in both for i in job_ids) == dict.fromkeys(ids, 2)
    assert set(entries.values_list("publish_attempts", flat=True)) == {2}

    harness.start_worker("w1", concurrency=2, **worker_env(harness))
    wait_until(
        lambda: all_in(batch, ("succeeded",)) and harness.broker_idle(),
        timeout=90,
        what="every job to succeed and every message to be acked",
    )
    wait_until(
        lambda: counter_value(DUPLICATE_DELIVERIES) == len(batch),
        timeout=30,
        what="one duplicate delivery per job",
    )
    assert_one_outcome_each(batch)
    effects = assert_effects_once(harness, batch)
    assert starts_by_job(harness) == dict.fromkeys(ids, 1)
    for job in rows(batch):
        assert (job.generation, job.attempt) == (1, 1)
        assert JobEvent.objects.filter(job=job, to_state="leased").count() == 1
        assert effects[str(job.pk)].calls == 1


def test_poison_job_in_batch_spends_only_its_own_attempts(harness: Harness, user: Any) -> None:
    """A job that kills its process, every time, in a batch with siblings: the siblings are
    charged one attempt each (the one that ran alone after the crash), the poison job
    spends its own budget (plus the one uncharged batch crash) and ends quarantined, and the
    worker's prefork pool keeps replacing its child and consuming."""
    inputs = [*steps(2), ("bchaos.poison", {}), *steps(3)]
    batch = submit_batch(user, inputs)
    assert broker_messages(harness) == [("jobs.execute_many", [str(j.pk) for j in batch])]
    poison = batch[2]
    siblings = [job for job in batch if job.pk != poison.pk]
    worker = harness.start_worker("w1", **worker_env(harness))
    start_relay(harness)

    reap_until_finished(batch, timeout=150)

    assert_one_outcome_each(siblings)
    assert_one_outcome_each([poison], state="quarantined")
    assert_effects_once(harness, siblings)
    starts = starts_by_job(harness)
    for index, job in enumerate(rows(siblings)):
        assert job.attempt == 1, (index, job.attempt)
        # The two before the poison ran in the killed batch too (uncharged), then once more.
        assert starts[str(job.pk)] == (2 if index < 2 else 1)
        charged = JobEvent.objects.filter(job=job, to_state="leased").exclude(
            reason="claimed in a batch"
        )
        assert list(charged.values_list("attempt", flat=True)) == [1]

    dead = Job.objects.get(pk=poison.pk)
    assert dead.attempt == dead.max_attempts == 3
    assert starts[str(poison.pk)] == dead.attempt + 1  # one uncharged crash: the batch's
    record = QuarantineRecord.objects.get(job_id=poison.pk)
    assert record.attempts == 3 and record.responsible == "chaos-team"
    assert JobEvent.objects.filter(job=poison, to_state="leased").count() == 4

    # One worker did it all: its pool replaced the child after every crash and kept going.
    # Each start names its parent itself: the batch waits in the broker before the worker
    # starts, so its first child can be dead before this test could list the pool.
    started = side_channel(harness, STARTS)
    poison_starts = [
        (int(pid), int(parent)) for job_id, _, pid, _, parent in started if job_id == str(poison.pk)
    ]
    poison_pids = [pid for pid, _ in poison_starts]
    assert len(set(poison_pids)) == len(poison_pids) == 4
    assert {parent for _, parent in poison_starts} == {worker.pid}
    assert worker.alive()
    later = [
        int(pid)
        for job_id, attempt, pid, _, _ in started
        if job_id != str(poison.pk) and attempt == "1"
    ]
    assert set(later) - {poison_pids[0]}, "siblings ran in a replaced pool child"
    owners = {j.lease_owner for j in rows(batch)} | set(
        JobEvent.objects.filter(job_id__in=[j.pk for j in batch], to_state="leased").values_list(
            "worker", flat=True
        )
    )
    assert all(owner.startswith("w1:") for owner in owners if owner)
    wait_until(harness.broker_idle, timeout=30, what="every message acked")
