"""The batch functions read jobs_job by primary key, whatever the planner's statistics say.

They run with generic plans (jobs/sql: `plan_cache_mode = force_generic_plan`), planned once
per connection. A plan made when few jobs were active must still look the message's ids up,
not scan the backlog: PostgreSQL's per-transaction counters (`pg_stat_xact_user_tables`)
show how many rows of jobs_job a call read, which must follow the ids, not the queue.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

import jobs
import tests.kinds_batch  # noqa: F401  (registers the batch kinds in this process too)

pytestmark = pytest.mark.django_db(transaction=True)

BACKLOG = 5000
IDS = 20


def _rows_read() -> int:
    """Rows of jobs_job this transaction read so far (sequential and through indexes)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname = 'jobs_job'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


@pytest.fixture
def quiet_statistics_then_a_backlog(user: Any, settings: Any) -> list[str]:
    """Statistics taken with no active job (as on a quiet system), then a backlog arrives."""
    settings.OUTBOX_FAST_PATH = False
    jobs.submit_many([{"kind": "batch.echo", "input": {"n": n}, "owner": user} for n in range(50)])
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET state = 'cancelled', finished_at = now()")
        cursor.execute("ANALYZE jobs_job")
    backlog = jobs.submit_many(
        [{"kind": "batch.echo", "input": {"n": n}, "owner": user} for n in range(BACKLOG)]
    )
    return [str(job.pk) for job in backlog]


def test_claim_and_complete_many__read_rows_by_id_not_the_backlog(
    quiet_statistics_then_a_backlog: list[str],
) -> None:
    ids = quiet_statistics_then_a_backlog[-IDS:]
    connection.close()  # a new connection: the plans are made now, with the quiet statistics
    with transaction.atomic():
        before = _rows_read()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, status, generation FROM jobs_claim_many("
                "%s::uuid[], %s::text[], %s::int[], %s::float8[], %s::text)",
                [ids, ["batch.echo"] * IDS, [1] * IDS, [30.0] * IDS, "w:plans:1"],
            )
            claimed = cursor.fetchall()
        claim_read = _rows_read() - before
        assert [row[1] for row in claimed] == ["claimed"] * IDS

        before = _rows_read()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM jobs_complete_many("
                "%s::uuid[], %s::bigint[], %s::text, %s::int[], %s::jsonb[])",
                [
                    [r[0] for r in claimed],
                    [r[2] for r in claimed],
                    "w:plans:1",
                    [1] * IDS,
                    ["{}"] * IDS,
                ],
            )
            completed = cursor.fetchall()
        complete_read = _rows_read() - before
        assert len(completed) == IDS

    # Reads follow the ids (a few each: the lookup, the lock, the update, the answer), not
    # the backlog: a plan that scans the due jobs reads all of them (the functions before
    # this test read 3,040 and 3,000 rows with a backlog of 3,000).
    assert claim_read < BACKLOG // 10, claim_read
    assert complete_read < BACKLOG // 10, complete_read
