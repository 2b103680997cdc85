"""Table health (jobs/ops/table_health.py): dead tuples of the hot tables and the oldest xmin
holder, read from PostgreSQL's statistics by /metrics and /ops/, under a real long
transaction on a second connection (the MVCC trap of issue 28)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

import jobs
from jobs.models import Job
from jobs.ops import table_health
from tests.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "table-health-token"
BURNED = 25  # transactions started after the long one took its snapshot
UPDATES = 200  # updates of one job row while the snapshot is held


def _burn_transactions(n: int) -> None:
    with connection.cursor() as cursor:
        for _ in range(n):
            cursor.execute("SELECT txid_current()")  # autocommit: one transaction each


def _metrics(settings: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    settings.JOBS_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_a_held_snapshot__the_horizon_names_an_age_of_at_least_the_transactions_since(
    held_snapshot: psycopg.Connection[Any], settings: Any
) -> None:
    _burn_transactions(BURNED)

    held = table_health.horizon()

    # The oldest holder of the cluster: ours or an older one, never younger.
    assert held is not None
    assert held.xmin_age >= BURNED
    assert held.holder in {"session", "replication slot", "prepared transaction"}
    samples = _metrics(settings)
    assert samples[("jobs_xmin_horizon_age_transactions", ())] >= BURNED
    assert samples[("jobs_xmin_horizon_age_seconds", ())] >= 0


def test_updates_under_a_held_snapshot__dead_tuples_of_jobs_job_reported(
    held_snapshot: psycopg.Connection[Any], user: Any, settings: Any
) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    before = {t.table: t for t in table_health.table_health()}["jobs_job"]
    for n in range(UPDATES):
        Job.objects.filter(pk=job.pk).update(error_message=f"update {n}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")

    def dead_now() -> int:
        return {t.table: t for t in table_health.table_health()}["jobs_job"].dead

    # The statistics reach shared memory when the updating session goes idle.
    wait_until(lambda: dead_now() - before.dead >= UPDATES, timeout=10, what="dead tuples")
    samples = _metrics(settings)
    assert samples[("jobs_table_dead_tuples", (("table", "jobs_job"),))] >= UPDATES
    assert samples[("jobs_table_size_bytes", (("table", "jobs_job"),))] > 0
    tables = {
        name
        for (metric, labels) in samples
        for name in [dict(labels).get("table")]
        if metric == "jobs_table_live_tuples"
    }
    assert {"jobs_job", "jobs_jobevent", "outbox_outboxentry"} <= tables


def test_ops_page__shows_the_tables_and_the_horizon(
    held_snapshot: psycopg.Connection[Any], admin_client: Any
) -> None:
    _burn_transactions(BURNED)

    page = admin_client.get("/ops/")

    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="tables"' in html and "<td>jobs_job</td>" in html
    assert "Oldest xmin held by a" in html
