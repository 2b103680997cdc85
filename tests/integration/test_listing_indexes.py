"""The listing indexes stay as dense as a fresh build while jobs arrive in time order.

Jobs of one owner (or tenant) arrive with ever larger created_at. Each of these indexes must
take them at the end of the owner's range, where a B-tree split keeps the left page full; at
the front of the range (a descending key, as before migration 0025) each split left a half-full
page behind for good, 1.8x the pages of a fresh build here and 1.55x bytes a row in the soak.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from jobs.models import Tenant

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 30_000  # per group: about 90 leaf pages of either index

# Finished no-op jobs, one per created_at step, in time order, as one statement inserts them
# row by row: half of the owner's own, half of its tenant's.
FILL = """
INSERT INTO jobs_job (
    id, kind, kind_version, input_version, request_fingerprint, input, state, attempt,
    max_attempts, generation, lease_owner, result, error_category, error_message,
    created_at, updated_at, started_at, finished_at, next_attempt_at, deadline, owner_id,
    tenant_id)
SELECT gen_random_uuid(), 'noop', 1, 1, md5(g::text), '{}'::jsonb, 'succeeded', 1, 3, 1, 't',
       '{}'::jsonb, '', '', t, t, t, t, t, t + interval '1 day', %(owner)s,
       CASE WHEN g %% 2 = 0 THEN %(tenant)s END
FROM generate_series(1, %(n)s) AS g,
     LATERAL (SELECT now() + make_interval(secs => g * 0.001) AS t) AS ts
"""


def _pages(cursor: Any, index: str) -> int:
    cursor.execute("SELECT pg_relation_size(%s::regclass) / 8192", [index])
    return int(cursor.fetchone()[0])


@pytest.mark.parametrize("index", ["jobs_job_owner_at_idx", "jobs_job_tenant_at_idx"])
def test_jobs_in_time_order_leave_a_listing_index_as_dense_as_a_fresh_build(index: str) -> None:
    owner = get_user_model().objects.create(username="lister")
    tenant = Tenant.objects.create(name="listers")
    with connection.cursor() as cursor:
        cursor.execute(FILL, {"owner": owner.pk, "tenant": tenant.pk, "n": 2 * ROWS})
        cursor.execute("SELECT pg_get_indexdef(%s::regclass)", [index])
        definition = cursor.fetchone()[0]
        grown = _pages(cursor, index)
        cursor.execute(definition.replace(f"INDEX {index} ", "INDEX listing_fresh ", 1))
        fresh = _pages(cursor, "listing_fresh")
        cursor.execute("DROP INDEX listing_fresh")
    assert fresh >= 50, fresh  # enough leaves for the split pattern to show
    assert grown <= 1.25 * fresh, f"{index}: {grown} pages grown, {fresh} built fresh"
