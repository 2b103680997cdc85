"""The outbox's marks look their rows up by primary key, whatever the planner's statistics say.

With the outbox quiet (a few hundred rows due among many published ones), a condition that
proves the due indexes' predicate (`published_at IS NULL`) let the planner scan a due index
whole and filter it by id. Under a held xmin horizon that index keeps an entry for every row
published since, so each mark walked all of them (outbox migration 0006). PostgreSQL's
per-transaction counters (`pg_stat_get_xact_numscans`) say which indexes a call scanned.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from outbox.marks import outbox_mark_published
from outbox.relay import outbox_mark_failed

pytestmark = pytest.mark.django_db(transaction=True)

PUBLISHED = 20_000
DUE = 300
IDS = 50
DUE_INDEXES = ("outbox_entry_due_idx", "outbox_entry_priority_due_idx")


@pytest.fixture
def quiet_statistics() -> list[int]:
    """Many published rows and a few due ones, analyzed; the ids of the due rows."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO outbox_outboxentry (task_name, queue, kwargs, created_at, "
            "available_at, published_at, publish_attempts, last_error, priority) "
            "SELECT 'jobs.execute', 'jobs', '{}', now(), now(), "
            "CASE WHEN g > %s THEN now() END, 0, '', 0 FROM generate_series(1, %s) g "
            "RETURNING id, published_at IS NULL",
            [DUE, PUBLISHED + DUE],
        )
        due = [row_id for row_id, unpublished in cursor.fetchall() if unpublished]
        cursor.execute("ANALYZE outbox_outboxentry")
    connection.close()  # a new connection: plans are made with these statistics
    assert len(due) == DUE
    return due


def _due_index_scans() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_stat_get_xact_numscans(oid)), 0) FROM pg_class "
            "WHERE relname = ANY(%s)",
            [list(DUE_INDEXES)],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def test_mark_published__looks_ids_up_not_the_due_index(quiet_statistics: list[int]) -> None:
    ids = quiet_statistics[:IDS]
    with transaction.atomic():
        # Six calls: PL/pgSQL plans its statement anew five times, then may keep a generic plan.
        marked = [outbox_mark_published(ids[n::6]) for n in range(6)]
        scans = _due_index_scans()
    assert sum(marked) == IDS
    assert scans == 0  # the function before migration 0006 scanned outbox_entry_due_idx


def test_mark_failed__looks_ids_up_not_the_due_index(quiet_statistics: list[int]) -> None:
    ids = quiet_statistics[:IDS]
    with transaction.atomic():
        outbox_mark_failed(dict.fromkeys(ids, "OperationalError: down"), dict.fromkeys(ids, 1))
        scans = _due_index_scans()
    assert scans == 0
