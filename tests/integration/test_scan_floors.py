"""Scan floors (outbox/floors.py) on real PostgreSQL, under a horizon a second session holds.

The churn of an hour (rows published, leases ended) stays in the queue indexes while the
snapshot is held: a walk from an index's start visits every entry, a walk from the floor
none of them. And a floor never hides a row for longer than the walk from the start that
comes every OUTBOX_SCAN_FLOOR_FULL_SECONDS.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import Job
from jobs.reaper import jobs_reap
from outbox.models import OutboxEntry
from outbox.relay import outbox_reserve_due
from tests.integration.test_reaper import expired_leased_job

pytestmark = pytest.mark.django_db(transaction=True)

CHURN = 3_000  # row versions left in an index while the snapshot is held
# Rows about as wide as busy ones, a few to a page: the walk's cost is in the heap pages its
# dead entries point to (EXPLAIN counts a buffer when the walk moves to another page).
PAD = "x" * 1500


@contextmanager
def buffers_of(table: str) -> Iterator[list[int]]:
    """Shared buffers each SELECT of `table` touched on this connection, from EXPLAIN
    (ANALYZE, BUFFERS) of the very statement and parameters, run just before it."""
    seen: list[int] = []

    def explained(execute: Callable[..., Any], sql: str, params: Any, many: bool, ctx: Any) -> Any:
        if sql.lstrip().startswith("SELECT") and f'FROM "{table}"' in sql:
            with ctx["connection"].connection.cursor() as cursor:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
                raw = cursor.fetchone()[0]
            plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
            seen.append(
                int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))
            )
        return execute(sql, params, many, ctx)

    with connection.execute_wrapper(explained):
        yield seen


def _analyze(table: str) -> None:
    """The statistics autovacuum would have taken: the planner then walks the partial index
    (few rows match it) as it does on a busy server, not the whole (small) table."""
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")


def _heap_pages(table: str, ids: list[Any]) -> int:
    """Heap pages holding these rows' current versions (their old ones sit beside them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(DISTINCT (ctid::text::point)[0]) FROM {table} WHERE id = ANY(%s)",
            [ids],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0])


def _published_an_hour_ago(n: int) -> int:
    """`n` outbox rows due an hour ago and published since: entries of the due index that
    VACUUM may not remove while the snapshot is held; returns the heap pages they are on."""
    due = timezone.now() - timedelta(hours=1)
    rows = OutboxEntry.objects.bulk_create(
        OutboxEntry(
            task_name="t",
            queue="q",
            kwargs={"pad": PAD},
            available_at=due + timedelta(milliseconds=i),
        )
        for i in range(n)
    )
    ids = [r.id for r in rows]
    OutboxEntry.objects.filter(id__in=ids).update(published_at=timezone.now())
    _analyze("outbox_outboxentry")
    return _heap_pages("outbox_outboxentry", ids)


def _due_row(**fields: Any) -> OutboxEntry:
    return OutboxEntry.objects.create(
        task_name="t", queue="q", **{"available_at": timezone.now(), **fields}
    )


def test_relay_sweep__under_a_held_horizon__walks_from_its_floor_not_the_hours_churn(
    held_snapshot: Any,
) -> None:
    pages = _published_an_hour_ago(CHURN)
    first = _due_row()
    with buffers_of("outbox_outboxentry") as full:
        assert [r.id for r in outbox_reserve_due(limit=10)] == [first.id]
    second = _due_row()
    with buffers_of("outbox_outboxentry") as bounded:
        assert [r.id for r in outbox_reserve_due(limit=10)] == [second.id]
    # The first sweep knew no floor: it walked the hour's dead entries (each a heap visit).
    assert sum(full) >= pages > CHURN // 10, (full, pages)
    # The second started at the floor, a margin under the oldest unpublished row.
    assert sum(bounded) * 20 < sum(full), (bounded, full)


def test_relay__a_row_under_the_floor__is_reserved_by_the_next_walk_from_the_start(
    settings: Any,
) -> None:
    settings.OUTBOX_SCAN_FLOOR_FULL_SECONDS = 3600.0
    assert outbox_reserve_due(limit=10) == []  # the floor: now less the margin
    late = _due_row(available_at=timezone.now() - timedelta(hours=1))  # a late commit
    assert outbox_reserve_due(limit=10) == []
    settings.OUTBOX_SCAN_FLOOR_FULL_SECONDS = 0.05
    time.sleep(0.1)  # past the full-walk period on this process's monotonic clock
    assert [r.id for r in outbox_reserve_due(limit=10)] == [late.id]


def test_relay__old_due_time_given_to_a_new_row__is_due_now_and_over_the_floor(
    settings: Any,
) -> None:
    from outbox.services import outbox_entry_new

    settings.OUTBOX_SCAN_FLOOR_FULL_SECONDS = 3600.0
    assert outbox_reserve_due(limit=10) == []
    before = timezone.now()
    row = outbox_entry_new(
        task_name="t", queue="q", available_at=before - timedelta(hours=1), fast_path=False
    )
    row.save()
    assert row.available_at >= before
    assert [r.id for r in outbox_reserve_due(limit=10)] == [row.id]


def test_reaper__under_a_held_horizon__walks_from_where_its_last_run_ended(
    user: Any, held_snapshot: Any
) -> None:
    an_hour_ago = timezone.now() - timedelta(hours=1)
    churn = Job.objects.bulk_create(
        expired_leased_job(
            user, lease_until=an_hour_ago + timedelta(milliseconds=i), input={"pad": PAD}
        )
        for i in range(CHURN)
    )
    ids = [j.pk for j in churn]
    Job.objects.filter(pk__in=ids).update(
        state="succeeded", result={}, finished_at=timezone.now(), lease_owner=None
    )
    _analyze("jobs_job")
    pages = _heap_pages("jobs_job", ids)
    expired_leased_job(user).save()
    with buffers_of("jobs_job") as full:
        assert jobs_reap().expired == 1
    expired_leased_job(user).save()  # its lease ended a minute ago: under the floor
    with buffers_of("jobs_job") as bounded:
        assert jobs_reap().expired == 0
    assert sum(full) >= pages > CHURN // 10, (full, pages)
    assert sum(bounded) * 20 < sum(full), (bounded, full)


def test_reaper__a_lease_under_the_floor__is_reaped_by_the_next_walk_from_the_start(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_SCAN_FLOOR_FULL_SECONDS = 3600.0
    assert jobs_reap().expired == 0  # a complete run: the floor is its end less the margin
    job = expired_leased_job(user)  # ended a minute ago, written after the run
    job.save()
    assert jobs_reap().expired == 0
    settings.OUTBOX_SCAN_FLOOR_FULL_SECONDS = 0.05
    time.sleep(0.1)  # past the full-walk period on this process's monotonic clock
    assert jobs_reap().expired == 1
    job.refresh_from_db()
    assert job.state == "retry_wait"


def test_reaper__a_run_cut_short_by_its_limit__keeps_the_floor_where_it_was(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_SCAN_FLOOR_FULL_SECONDS = 3600.0
    for _ in range(3):
        expired_leased_job(user).save()
    assert jobs_reap(limit=2).expired == 2  # not every ended lease was seen: no floor yet
    assert jobs_reap(limit=2).expired == 1
