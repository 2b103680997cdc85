"""The maintenance walks stay on the index whose key they walk, whatever the statistics say.

With statistics from a quiet moment (no active job), the planner estimated the redelivery
check's walks of the claimable jobs and the count of expired leases at one row on any partial
index of active jobs, and planned some of them on `jobs_job_active_created_idx`, whole and
filtered. Under a held xmin horizon that index holds an entry for every job active since, so
each walk read all of them (jobs/plans.py; docs/benchmarks.md, the soak runs' note).
PostgreSQL's per-transaction counters (`pg_stat_get_xact_numscans`) say which indexes a call
scanned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from jobs.ops.redeliver import redeliver_run
from jobs.ops.selectors import expired_lease_count, oldest_due_at
from jobs.reaper import jobs_reap

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = 20_000
DUE = 300
ACTIVE_CREATED = "jobs_job_active_created_idx"
INDEXES = (ACTIVE_CREATED, "jobs_job_due_idx", "jobs_job_lease_expiry_idx")

_JOBS = """
INSERT INTO jobs_job (
    id, kind, kind_version, input_version, request_fingerprint, input, state, attempt,
    max_attempts, generation, result, error_category, error_message, created_at, updated_at,
    started_at, finished_at, next_attempt_at, owner_id)
SELECT gen_random_uuid(), 'noop', 1, 1, md5(g::text), '{}'::jsonb, %(state)s, 0, 3, 0,
       CASE WHEN %(state)s = 'succeeded' THEN '{}'::jsonb END, '', '', t, t, t,
       CASE WHEN %(state)s = 'succeeded' THEN t END, t, %(owner)s
FROM generate_series(1, %(n)s) AS g, LATERAL (SELECT now() - %(ago)s * interval '1 s' AS t) AS a
"""


@pytest.fixture
def quiet_statistics(user: Any) -> None:
    """Many finished jobs analyzed with none active (a quiet moment), then a due backlog and
    one lease that ended long ago."""
    with connection.cursor() as cursor:
        cursor.execute(_JOBS, {"state": "succeeded", "n": FINISHED, "owner": user.pk, "ago": 3600})
        cursor.execute("ANALYZE jobs_job")
        cursor.execute(_JOBS, {"state": "queued", "n": DUE, "owner": user.pk, "ago": 1})
        cursor.execute(_JOBS, {"state": "queued", "n": 1, "owner": user.pk, "ago": 900})
        cursor.execute(
            "UPDATE jobs_job SET state = 'leased', generation = 1, attempt = 1, "
            "lease_owner = 'gone:1', lease_until = now() - interval '10 min' "
            "WHERE created_at < now() - interval '10 min' AND state = 'queued'"
        )
    connection.close()  # a new connection: plans are made with these statistics


def _scans() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, pg_stat_get_xact_numscans(oid) FROM pg_class WHERE relname = ANY(%s)",
            [list(INDEXES)],
        )
        return {name: int(n) for name, n in cursor.fetchall()}


def _scanned(call: Callable[[], object]) -> dict[str, int]:
    """Scans of each index by `call`, in one transaction (the counters are per transaction)."""
    with transaction.atomic():
        before = _scans()
        call()
        after = _scans()
    return {name: after[name] - before[name] for name in INDEXES}


@pytest.mark.usefixtures("quiet_statistics")
def test_redelivery_check__walks_the_due_index_never_every_active_job() -> None:
    scanned = _scanned(redeliver_run)

    assert scanned[ACTIVE_CREATED] == 0, scanned
    assert scanned["jobs_job_due_idx"] >= 3, scanned  # the floor, the backlog, the window


@pytest.mark.usefixtures("quiet_statistics")
def test_expired_lease_count__walks_the_lease_index() -> None:
    counted: list[int] = []
    scanned = _scanned(lambda: counted.append(expired_lease_count(older_than=300)))

    assert counted == [1]
    assert scanned[ACTIVE_CREATED] == 0, scanned
    assert scanned["jobs_job_lease_expiry_idx"] == 1, scanned


@pytest.mark.usefixtures("quiet_statistics")
def test_reaper__walks_the_lease_index() -> None:
    reaped = []
    scanned = _scanned(lambda: reaped.append(jobs_reap()))

    assert reaped[0].expired == 1
    assert scanned[ACTIVE_CREATED] == 0, scanned
    assert scanned["jobs_job_lease_expiry_idx"] >= 1, scanned


@pytest.mark.usefixtures("quiet_statistics")
def test_oldest_due_job__the_first_entry_of_the_due_index() -> None:
    found: list[Any] = []
    scanned = _scanned(lambda: found.append(oldest_due_at()))

    assert found[0] is not None
    assert scanned[ACTIVE_CREATED] == 0, scanned
    assert scanned["jobs_job_due_idx"] == 1, scanned
