"""Behind PgBouncer in transaction mode: real workers, relay and submits, prepared statements on.

A private PgBouncer (>= 1.22, scripts/ensure-pgbouncer.sh; `make test` runs it) listens on a
free port in front of the test database with `pool_mode = transaction` and fewer server
connections than clients, so every process's statements move between server connections.
With `max_prepared_statements` set, the per-job prepared statements (jobs/prepared.py) keep
working; without it (what PgBouncer before 1.21 does) they collide, and
JOBS_PREPARED_STATEMENTS=0 is the way to run. docs/operations.md, "Behind PgBouncer".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from jobs.models import Job, QuarantineRecord
from tests import kinds_operators  # noqa: F401  (registers test.ops.*)
from tests.harness import ROOT, Harness, free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MIN_VERSION = (1, 22)
WORKER_MODULES = "tests.kinds_operators"


def pgbouncer_binary() -> str | None:
    """The first PgBouncer new enough: $JOBS_TEST_PGBOUNCER, var/pgbouncer, PATH, /usr/sbin."""
    candidates = [
        os.environ.get("JOBS_TEST_PGBOUNCER", ""),
        str(ROOT / "var" / "pgbouncer" / "bin" / "pgbouncer"),
        shutil.which("pgbouncer") or "",
        "/usr/sbin/pgbouncer",
    ]
    for candidate in filter(None, candidates):
        if os.access(candidate, os.X_OK) and pgbouncer_version(candidate) >= MIN_VERSION:
            return candidate
    return None


def pgbouncer_version(binary: str) -> tuple[int, ...]:
    first = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10
    ).stdout.split()
    return tuple(int(part) for part in first[1].split(".")) if len(first) > 1 else ()


@dataclass
class PrivatePgBouncer:
    """A PgBouncer of the test's own, in front of 127.0.0.1:5432; stopped by pid."""

    binary: str
    max_prepared_statements: int
    pool_size: int
    port: int = field(default_factory=free_port)
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="jobs-pgbouncer-")))
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            "* = host=127.0.0.1 port=5432\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.dir / 'userlist.txt'}\n"
            "admin_users = postgres\n"
            "pool_mode = transaction\n"
            f"max_prepared_statements = {self.max_prepared_statements}\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 200\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
        )
        argv = [self.binary, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            shutil.chown(self.dir, "postgres")
            argv[1:1] = ["-u", "postgres"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.answers, timeout=15, what="the private pgbouncer to answer")

    def answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited:\n{self.log()[-2000:]}")
        try:
            self.show("VERSION")
        except psycopg.OperationalError:
            return False
        return True

    def url(self, database: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def show(self, what: str) -> list[dict[str, Any]]:
        """A SHOW command of the admin console, rows as dicts."""
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname="pgbouncer", autocommit=True
        ) as admin:
            cursor = admin.execute(f"SHOW {what}", prepare=False)
            names = [column.name for column in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def binary() -> str:
    found = pgbouncer_binary()
    if found is None:
        message = "no PgBouncer >= 1.22: run scripts/ensure-pgbouncer.sh (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


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
    harness.start_worker("wbouncer", concurrency=2, **through)
    harness.start_relay(**through)
    harness.manage("shell", "-c", SUBMIT, **through)
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
