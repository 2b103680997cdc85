"""The relay packs due rows into batch messages (outbox.batching), read back from the
suite's private Redis: what a worker would receive."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis
from django.utils import timezone
from kombu import Producer

import tests.kinds_batch  # noqa: F401  (registers the batch kinds in this process too)
from jobs.bulk_submit import job_submit_many
from jobs.models import Job
from outbox.batching import messages_of
from outbox.models import OutboxEntry
from outbox.relay import outbox_relay_batch
from tests.harness import queue_envelopes
from tests.kinds_batch import OTHER_QUEUE

pytestmark = pytest.mark.django_db(transaction=True)

Message = tuple[str, dict[str, Any]]


def broker_messages(client: redis.Redis, queue: str = "jobs") -> list[Message]:
    """(task name, kwargs) of every message waiting in `queue`, oldest first (kombu's Redis
    transport LPUSHes a JSON envelope whose body is base64 of [args, kwargs, embed])."""
    messages = []
    for raw in queue_envelopes(client, queue):
        envelope = json.loads(raw)
        args, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        assert args == []
        messages.append((envelope["headers"]["task"], kwargs))
    return messages


def job_ids_of(message: Message) -> list[str]:
    """The jobs one message carries, in order."""
    task, kwargs = message
    if task == "jobs.execute_many":
        return [item["job_id"] for item in kwargs["items"]]
    assert task == "jobs.execute"
    return [kwargs["job_id"]]


def _submit(user: Any, kind: str, count: int) -> list[Job]:
    return job_submit_many([{"kind": kind, "input": {"n": n}, "owner": user} for n in range(count)])


def _kwargs_by_job() -> dict[str, dict[str, Any]]:
    return {str(row.job_id): row.kwargs for row in OutboxEntry.objects.all()}


@pytest.fixture
def relay_only(settings: Any) -> None:
    """Rows wait for the relay: no fast path from this process."""
    settings.OUTBOX_FAST_PATH = False


@pytest.mark.parametrize(
    ("rows", "most", "sizes"),
    [
        (45, 20, [15, 15, 15]),  # spread evenly, not 20 + 20 + 5
        (21, 20, [11, 10]),
        (20, 20, [20]),
        (1, 20, [1]),  # alone: a plain jobs.execute, no batching latency
        (5, 1, [1, 1, 1, 1, 1]),  # OUTBOX_BATCH_MAX=1: never packed
    ],
)
def test_a_relay_sweep__packs_due_rows_into_even_messages__marks_every_row(
    user: Any,
    broker: redis.Redis,
    settings: Any,
    relay_only: None,
    rows: int,
    most: int,
    sizes: list[int],
) -> None:
    settings.OUTBOX_BATCH_MAX = most
    submitted = _submit(user, "batch.echo", rows)
    assert OutboxEntry.objects.filter(published_at__isnull=True).count() == rows

    result = outbox_relay_batch()

    assert (result.reserved, result.published, result.failed) == (rows, rows, 0)
    messages = broker_messages(broker)
    assert [len(job_ids_of(m)) for m in messages] == sizes
    for task, _ in messages:
        assert task == ("jobs.execute" if len(sizes) == rows else "jobs.execute_many")
    carried = [job_id for m in messages for job_id in job_ids_of(m)]
    assert sorted(carried) == sorted(str(job.pk) for job in submitted)  # each row once
    kwargs = _kwargs_by_job()
    for task, body in messages:
        items = body["items"] if task == "jobs.execute_many" else [body]
        assert items == [kwargs[item["job_id"]] for item in items]  # each row's own kwargs
    assert not OutboxEntry.objects.filter(published_at__isnull=True).exists()
    assert outbox_relay_batch().reserved == 0  # nothing left for the next sweep


def test_batch_false_kind_and_capped_kind__stay_single_messages(
    user: Any, broker: redis.Redis, relay_only: None
) -> None:
    alone = _submit(user, "batch.alone", 4)
    capped = _submit(user, "batch.capped", 4)
    packed = _submit(user, "batch.echo", 4)

    assert outbox_relay_batch().published == 12

    messages = broker_messages(broker)
    singles = sorted(m[1]["job_id"] for m in messages if m[0] == "jobs.execute")
    batches = [job_ids_of(m) for m in messages if m[0] == "jobs.execute_many"]
    assert singles == sorted(str(job.pk) for job in alone + capped)
    assert [sorted(ids) for ids in batches] == [sorted(str(job.pk) for job in packed)]
    assert not OutboxEntry.objects.filter(published_at__isnull=True).exists()


def test_rows_of_different_queues__never_share_a_message(
    user: Any, broker: redis.Redis, relay_only: None
) -> None:
    here = _submit(user, "batch.echo", 6)
    elsewhere = _submit(user, "batch.elsewhere", 6)

    assert outbox_relay_batch().published == 12

    jobs_queue = broker_messages(broker, "jobs")
    other_queue = broker_messages(broker, OTHER_QUEUE)
    assert [task for task, _ in jobs_queue + other_queue] == ["jobs.execute_many"] * 2
    assert sorted(job_ids_of(jobs_queue[0])) == sorted(str(job.pk) for job in here)
    assert sorted(job_ids_of(other_queue[0])) == sorted(str(job.pk) for job in elsewhere)


def test_rows_without_a_rule_or_a_known_kind__go_alone() -> None:
    """Pure packing rules: an old message without hints, a kind this process does not know
    and a task without a batch rule are never packed; the rest is, in chunks per queue."""

    def row(row_id: int, task: str = "jobs.execute", queue: str = "jobs", **kwargs: Any) -> Any:
        return OutboxEntry(id=row_id, task_name=task, queue=queue, kwargs=kwargs)

    rows = [
        row(1, job_id="a"),  # no kind hint
        row(2, job_id="b", kind="no.such.kind", kind_version=1),
        row(3, task="other.task", job_id="c", kind="batch.echo", kind_version=1),
        row(4, job_id="d", kind="batch.echo", kind_version="1"),  # not an int version
        row(5, job_id="e", kind="batch.echo", kind_version=1),
        row(6, job_id="f", kind="batch.echo", kind_version=1),
        row(7, queue="q2", job_id="g", kind="batch.echo", kind_version=1),
    ]

    messages = messages_of(rows)

    shape = sorted((m.task_name, m.queue, tuple(m.ids)) for m in messages)
    assert shape == [
        ("jobs.execute", "jobs", (1,)),
        ("jobs.execute", "jobs", (2,)),
        ("jobs.execute", "jobs", (4,)),
        ("jobs.execute", "q2", (7,)),  # alone in its queue
        ("jobs.execute_many", "jobs", (5, 6)),
        ("other.task", "jobs", (3,)),
    ]
    [packed] = [m for m in messages if m.task_name == "jobs.execute_many"]
    assert packed.kwargs == {"items": [rows[4].kwargs, rows[5].kwargs]}


def test_a_batch_message_the_broker_refuses__its_rows_back_off_unmarked(
    user: Any, broker: redis.Redis, relay_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every row a refused message carries is pushed back for the next sweep, with the
    error; a single message published in the same sweep is marked."""
    alone = _submit(user, "batch.alone", 1)
    packed = _submit(user, "batch.echo", 3)
    real = Producer.publish

    def refuse_batches(producer: Producer, body: Any, **kwargs: Any) -> Any:
        if kwargs["headers"]["task"] == "jobs.execute_many":
            raise ConnectionError("broker said no")
        return real(producer, body, **kwargs)

    monkeypatch.setattr(Producer, "publish", refuse_batches)

    result = outbox_relay_batch()

    assert (result.published, result.failed) == (1, 3)
    assert [job_ids_of(m) for m in broker_messages(broker)] == [[str(alone[0].pk)]]
    for job in packed:
        row = OutboxEntry.objects.get(job_id=job.pk)
        assert row.published_at is None and row.reserved_until is None
        assert "broker said no" in row.last_error
        assert row.available_at > timezone.now()  # backed off: not the next sweep's at once
    assert OutboxEntry.objects.get(job_id=alone[0].pk).published_at is not None


def test_jobs_a_batch_releases_in_its_group_commit__leave_packed_in_one_message(
    user: Any, broker: redis.Redis, settings: Any
) -> None:
    """The budget is spent after the first handler: the three jobs not started are given
    back in the group commit, and their new rows (fast path, due now) go out together after
    it, in one batch message: not one message each (outbox.services.outbox_publish_together)."""
    from jobs import batch

    settings.JOBS_BATCH_BUDGET_SECONDS = 0.05
    slow = job_submit_many([{"kind": "batch.echo", "input": {"sleep": 0.2}, "owner": user}])
    rest = job_submit_many(
        [{"kind": "batch.echo", "input": {"n": n}, "owner": user} for n in range(3)]
    )
    broker.flushdb()  # the submissions' own messages: not what this test reads
    items = [dict(OutboxEntry.objects.get(job_id=job.pk).kwargs) for job in slow + rest]

    batch.execute_many(items)

    assert [Job.objects.get(pk=job.pk).state for job in rest] == ["retry_wait"] * 3
    messages = broker_messages(broker)
    assert [task for task, _ in messages] == ["jobs.execute_many"]
    assert sorted(job_ids_of(messages[0])) == sorted(str(job.pk) for job in rest)
    released = OutboxEntry.objects.filter(job_id__in=[job.pk for job in rest]).order_by("-id")[:3]
    assert all(row.published_at is not None or row.reserved_until is not None for row in released)


def test_keyed_jobs__may_share_a_message_which_never_names_the_key(
    user: Any, broker: redis.Redis, relay_only: None
) -> None:
    """The heads of several keys are packed like any job (the batch claim takes a key's
    head); the message carries ids and hints only, never the key."""
    plain = _submit(user, "batch.echo", 4)
    keyed = job_submit_many(
        [
            {
                "kind": "batch.echo",
                "input": {"n": n},
                "owner": user,
                "serialization_key": f"doc:{n}",
            }
            for n in range(3)
        ]
    )

    outbox_relay_batch()

    messages = broker_messages(broker)
    assert [task for task, _ in messages] == ["jobs.execute_many"]
    assert sorted(job_ids_of(messages[0])) == sorted(str(j.pk) for j in plain + keyed)
    assert not any("doc:" in json.dumps(kwargs) for _, kwargs in messages)
