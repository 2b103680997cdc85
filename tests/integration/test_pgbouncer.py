"""Behind PgBouncer in transaction mode: real workers, relay and submits, prepared statements on.

A private PgBouncer (>= 1.22, scripts/ensure-pgbouncer.sh; `make test` runs it) listens on a
free port in front of the test database with `pool_mode = transaction` and fewer server
connections than clients, so every process's statements move between server connections.
With `max_prepared_statements` set, the per-job prepared statements (jobs/prepared.py) keep
working; without it (what PgBouncer before 1.21 does) they collide, and
JOBS_PREPARED_STATEMENTS=0 is the way to run. docs/operations.md, "Behind PgBouncer".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from jobs.models import Job, QuarantineRecord
from tests import kinds_operators  # noqa: F401  (registers test.ops.*)
from tests.harness import Harness, wait_until
from tests.pgbouncer import PrivatePgBouncer, pgbouncer_or_skip

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_MODULES = "tests.kinds_operators"


@pytest.fixture(scope="module")
def binary() -> str:
    return pgbouncer_or_skip()


def bouncer(binary: str, *, max_prepared_statements: int, pool_size: int) -> PrivatePgBouncer:
    return PrivatePgBouncer(binary, max_prepared_statements, pool_size)


# Tests ask for the pooler before the harness: fixtures are torn down in reverse, so the
# workers stop before the pooler they connect through.
@pytest.fixture
def pooler(binary: str) -> Iterator[PrivatePgBouncer]:
    """Transaction pooling with prepared statements kept; 2 server connections for more
    clients (two pool processes, their heartbeat and mark threads, the relay, submits)."""
    server = bouncer(binary, max_prepared_statements=200, pool_size=2)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def old_pooler(binary: str) -> Iterator[PrivatePgBouncer]:
    """Transaction pooling that does not keep prepared statements (PgBouncer before 1.21)."""
    server = bouncer(binary, max_prepared_statements=0, pool_size=1)
    try:
        server.start()
        yield server
    finally:
        server.stop()


SUBMIT = """
import jobs
from django.contrib.auth.models import User
owner = User.objects.get(username="alice")
for n in range(12):
    jobs.submit(kind="noop", input={"n": n}, owner=owner, serialization_key=f"key-{n % 3}")
for n in range(3):
    jobs.submit(kind="test.ops.flaky", input={"n": n}, owner=owner)
jobs.submit(kind="test.ops.document", input={"document_id": 4}, owner=owner)
jobs.submit(kind="test.ops.document", input={"document_id": 0}, owner=owner)
"""
JOBS = 17


def run_through(harness: Harness, database_url: str, **env: str) -> None:
    """Worker, relay and the submitting process all connect through `database_url`."""
    through = {"DATABASE_URL": database_url, "JOBS_HANDLER_MODULES": WORKER_MODULES, **env}
    harness.start_worker("wbouncer", concurrency=2, env=through)
    harness.start_relay(env=through)
    harness.manage("shell", "-c", SUBMIT, env=through)
    wait_until(
        lambda: Job.objects.filter(state__in=["succeeded", "quarantined"]).count() == JOBS,
        timeout=90,
        what="every job submitted through the pooler to finish",
    )


def assert_outcomes() -> None:
    assert Job.objects.count() == JOBS
    assert Job.objects.filter(state="succeeded").count() == JOBS - 1
    assert sorted(Job.objects.filter(kind="test.ops.flaky").values_list("attempt", flat=True)) == [
        2,
        2,
        2,
    ]  # each retried once, through the outbox and the relay
    record = QuarantineRecord.objects.get()
    assert record.reason == "permanent failure: the upstream archive has no such document"


def database_name() -> str:
    return str(connection.settings_dict["NAME"])


def test_jobs_run_behind_pgbouncer__transaction_mode_prepared_statements_on(
    pooler: PrivatePgBouncer, harness: Harness, user: Any
) -> None:
    run_through(harness, pooler.url(database_name()))

    assert_outcomes()
    stats = next(s for s in pooler.show("STATS") if s["database"] == database_name())
    # Clients sent protocol-level prepared statements; PgBouncer prepared each once per
    # server connection and bound it again and again.
    assert stats["total_client_parse_count"] > 0 and stats["total_server_parse_count"] > 0
    assert stats["total_bind_count"] >= 2 * JOBS, stats  # every claim and completion
    assert stats["total_bind_count"] > 2 * stats["total_server_parse_count"], stats
    assert stats["total_xact_count"] > JOBS * 2
    # Maintenance through the pooler too: reconciliation finds nothing broken.
    report = harness.manage(
        "jobs_reconcile", "--json", DATABASE_URL=pooler.url(database_name()), check=False
    )
    assert report.returncode == 0, report.stdout + report.stderr
    logs = "".join(p.log() for p in harness.procs) + pooler.log()
    assert "prepared statement" not in logs.lower(), logs[-3000:]


def test_prepared_statements_collide__pooler_without_prepared_statement_support(
    old_pooler: PrivatePgBouncer,
) -> None:
    """Two clients on one server connection: both name their first statement `_pg3_0`."""
    url = old_pooler.url(database_name())
    with (
        psycopg.connect(url, autocommit=True) as first,
        psycopg.connect(url, autocommit=True) as second,
    ):
        assert first.execute("SELECT %s::int", [1], prepare=True).fetchone() == (1,)
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            second.execute("SELECT %s::int + 1", [1], prepare=True)


def test_jobs_run_behind_an_old_pooler__prepared_statements_off(
    old_pooler: PrivatePgBouncer, harness: Harness, user: Any
) -> None:
    run_through(harness, old_pooler.url(database_name()), JOBS_PREPARED_STATEMENTS="0")

    assert_outcomes()
    stats = next(s for s in old_pooler.show("STATS") if s["database"] == database_name())
    assert stats["total_client_parse_count"] == 0  # nothing prepared: nothing to lose
