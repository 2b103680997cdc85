"""Priorities (issue 27, part 1): stored on submit, submit_many, `@handler` and django.tasks,
shown by the API, carried by the job's outbox row; the relay publishes due rows in priority
order with aging (docs/architecture.md, "Priorities")."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

import jobs
import tests.kinds_priority  # noqa: F401  (registers the priority kinds in this process)
from jobs import batch
from jobs.dispatch import execute_kwargs
from jobs.models import Job
from outbox import batching
from outbox.models import OutboxEntry
from outbox.relay import outbox_reserve_due, reservation_split
from tests.integration.api_helpers import submit, token_client

pytestmark = pytest.mark.django_db


def test_submit__priority_stored__else_the_kinds_default(user: Any) -> None:
    given = jobs.submit(kind="prio.plain", input={}, owner=user, priority=7)
    kind_default = jobs.submit(kind="prio.high", input={}, owner=user)
    overridden = jobs.submit(kind="prio.high", input={}, owner=user, priority=-3)
    plain = jobs.submit(kind="prio.plain", input={}, owner=user)

    stored = dict(Job.objects.values_list("pk", "priority"))
    assert [stored[j.pk] for j in (given, kind_default, overridden, plain)] == [7, 100, -3, 0]


@pytest.mark.parametrize("bad", [101, -101, True, "5", 1.5])
def test_submit__priority_out_of_range_or_not_an_int__value_error_nothing_written(
    user: Any, bad: Any
) -> None:
    with pytest.raises(ValueError, match="priority"):
        jobs.submit(kind="prio.plain", input={}, owner=user, priority=bad)
    assert not Job.objects.exists()


def test_handler__priority_out_of_range__refused_at_registration() -> None:
    with pytest.raises(ValueError, match="out of range"):
        jobs.handler("prio.bad", priority=200)(lambda ctx, data: {})


def test_submit_many__priority_per_request__plain_and_keyed(user: Any) -> None:
    written = jobs.submit_many(
        [
            {"kind": "prio.plain", "input": {"n": 1}, "owner": user, "priority": 42},
            {"kind": "prio.high", "input": {"n": 2}, "owner": user},
            {"kind": "prio.plain", "input": {"n": 3}, "owner": user},
            {"kind": "prio.plain", "input": {}, "owner": user, "priority": -9, "business_key": "b"},
        ]
    )

    stored = dict(Job.objects.values_list("pk", "priority"))
    assert [stored[j.pk] for j in written] == [42, 100, 0, -9]
    assert [j.priority for j in written] == [42, 100, 0, -9]


def test_api_job_detail__shows_the_jobs_priority(user: Any) -> None:
    job = jobs.submit(kind="prio.high", input={}, owner=user)

    body = token_client(user).get(f"/api/jobs/{job.pk}/").json()

    assert body["priority"] == 100


def test_api_submit__priority_stored__omitted_or_null_the_kinds_default(user: Any) -> None:
    client = token_client(user)
    given = submit(client, {"kind": "prio.high", "priority": -7})
    omitted = submit(client, {"kind": "prio.high"})
    null = submit(client, {"kind": "prio.high", "priority": None})

    assert [r.status_code for r in (given, omitted, null)] == [202, 202, 202]
    stored = [Job.objects.get(pk=r.json()["id"]).priority for r in (given, omitted, null)]
    assert stored == [-7, 100, 100]


@pytest.mark.parametrize("priority", [101, -101, "5", 2.5, True])
def test_api_submit__priority_out_of_range_or_not_an_int__400_nothing_written(
    user: Any, priority: Any
) -> None:
    response = submit(token_client(user), {"kind": "prio.high", "priority": priority})

    assert response.status_code == 400
    assert "priority" in response.json()["error"]["details"]
    assert Job.objects.count() == 0


# -- the outbox: each job's row carries its priority; the relay reserves by it, with aging ---


@pytest.fixture
def relay_only(settings: Any) -> None:
    """Rows wait for the relay: no fast path from this process."""
    settings.OUTBOX_FAST_PATH = False


def test_outbox_row__carries_the_jobs_priority__submit_and_submit_many(
    user: Any, relay_only: None
) -> None:
    one = jobs.submit(kind="prio.high", input={}, owner=user)
    many = jobs.submit_many(
        [
            {"kind": "prio.low", "input": {}, "owner": user},
            {"kind": "prio.plain", "input": {}, "owner": user, "priority": 12},
        ]
    )

    stored = dict(OutboxEntry.objects.values_list("job_id", "priority"))
    assert [stored[j.pk] for j in (one, *many)] == [100, -100, 12]


def _rows(count: int, priority: int, *, age: float) -> list[int]:
    """`count` due rows of `priority`, due `age` seconds ago (older first by id)."""
    due = timezone.now() - timedelta(seconds=age)
    made = OutboxEntry.objects.bulk_create(
        OutboxEntry(task_name="t.plain", queue="q", priority=priority, available_at=due)
        for _ in range(count)
    )
    return [row.id for row in made]


def test_reserve__a_backlog__a_share_of_the_oldest__the_rest_by_priority_highest_first() -> None:
    old_low = _rows(30, -100, age=60)
    plain = _rows(30, 0, age=30)
    high = _rows(30, 100, age=1)
    oldest, by_priority = reservation_split(20)

    reserved = [row.id for row in outbox_reserve_due(limit=20)]

    assert (oldest, by_priority) == (5, 15)
    assert reserved == old_low[:5] + high[:15]
    assert [row.id for row in outbox_reserve_due(limit=20)] == old_low[5:10] + high[15:30]
    # Nothing higher is due: by priority, then by age.
    assert [row.id for row in outbox_reserve_due(limit=20)] == old_low[10:15] + plain[:15]


def test_reserve__no_backlog__every_due_row_at_once() -> None:
    low, high = _rows(2, -100, age=5), _rows(2, 100, age=1)

    assert sorted(row.id for row in outbox_reserve_due(limit=20)) == sorted(low + high)


def test_reserve__a_steady_stream_of_high__every_low_row_within_the_bound() -> None:
    """The starvation bound (docs/architecture.md, "Priorities"): under any stream of
    higher-priority rows, a due row with K older due rows ahead of it is reserved within
    ceil((K + 1) / oldest share) reservations."""
    low = set(_rows(1000, -100, age=600))
    limit = 100
    oldest, _ = reservation_split(limit)
    bound = math.ceil(len(low) / oldest)
    reservations = 0
    while low:
        _rows(2 * limit, 100, age=0)  # more high rows arrive than one reservation takes
        low -= {row.id for row in outbox_reserve_due(limit=limit)}
        reservations += 1
        assert reservations <= bound
    assert reservations == bound


def test_messages_of__bands_never_share_a_message__highest_first() -> None:
    batching.batch_rule_add("t.packed", batch_task="t.packed_many")
    rows = [
        OutboxEntry(id=n, task_name="t.packed", queue="q", kwargs={"n": n}, priority=p)
        for n, p in enumerate([-5, 0, 7, -5, 0, 7, 100])
    ]
    try:
        messages = batching.messages_of(rows)
    finally:
        batching._rules.pop("t.packed")

    assert [(m.priority, m.ids) for m in messages] == [(100, [2, 5, 6]), (0, [1, 4]), (-5, [0, 3])]


# --- the job's priority on every later message of it ---------------------------------------


def _execute_rows(job: Job) -> list[int]:
    """The priorities of `job`'s outbox rows, oldest first."""
    rows = OutboxEntry.objects.filter(job_id=job.pk).order_by("created_at", "id")
    return list(rows.values_list("priority", flat=True))


@pytest.mark.django_db(transaction=True)
def test_retry__its_message_carries_the_jobs_priority_not_the_kinds_default(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    job = jobs.submit(kind="prio.flaky", input={}, owner=user, priority=60)

    report = jobs.execute(job.pk)

    job.refresh_from_db()
    assert (report.outcome, job.state) == ("retry_scheduled", "retry_wait"), report
    assert _execute_rows(job) == [60, 60]


@pytest.mark.django_db(transaction=True)
def test_keyed_successor__its_message_carries_its_own_priority(user: Any, settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False
    head = jobs.submit(kind="prio.plain", input={"n": 1}, owner=user, serialization_key="k")
    waiting = jobs.submit(
        kind="prio.plain", input={"n": 2}, owner=user, serialization_key="k", priority=-40
    )
    assert _execute_rows(waiting) == []  # not its turn: no message yet

    jobs.execute(head.pk)

    assert _execute_rows(waiting) == [-40]


@pytest.mark.django_db(transaction=True)
def test_keyed_successor_of_a_group_commit__its_message_carries_its_own_priority(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    head = jobs.submit(kind="prio.plain", input={"n": 1}, owner=user, serialization_key="g")
    waiting = jobs.submit(
        kind="prio.plain", input={"n": 2}, owner=user, serialization_key="g", priority=25
    )

    reports = batch.execute_many([execute_kwargs(head.pk, 0, "prio.plain", 1)])

    assert [r.outcome for r in reports] == ["succeeded"]

    assert _execute_rows(waiting) == [25]
