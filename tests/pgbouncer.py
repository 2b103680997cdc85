"""A private PgBouncer for tests: transaction pooling in front of one PostgreSQL, stopped by pid.

Needs PgBouncer >= 1.22 (scripts/ensure-pgbouncer.sh; `make test` runs it): 1.21 brought
`max_prepared_statements`, 1.22 handles the `DEALLOCATE ALL` psycopg sends after a rollback.
`repoint()` is what an operator (or a failover tool's callback) does after a promotion: edit
the `[databases]` entry, then `RELOAD` on the admin console.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.harness import ROOT, free_port, wait_until

MIN_VERSION = (1, 22)


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


def pgbouncer_or_skip() -> str:
    """The binary, or skip (fail under CI) with how to get one."""
    found = pgbouncer_binary()
    if found is None:
        message = "no PgBouncer >= 1.22: run scripts/ensure-pgbouncer.sh (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@dataclass
class PrivatePgBouncer:
    """A PgBouncer of the test's own, in front of 127.0.0.1:`upstream_port`; stopped by pid.
    `settings` adds lines to its [pgbouncer] section."""

    binary: str
    max_prepared_statements: int
    pool_size: int
    upstream_port: int = 5432
    settings: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="jobs-pgbouncer-")))
    proc: subprocess.Popen[bytes] | None = None

    def _write_ini(self) -> None:
        extra = "".join(f"{name} = {value}\n" for name, value in self.settings.items())
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.upstream_port}\n"
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
            f"logfile = {self.dir / 'pgbouncer.log'}\n" + extra
        )

    def start(self) -> None:
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        self._write_ini()
        argv = [self.binary, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            shutil.chown(self.dir, "postgres")
            argv[1:1] = ["-u", "postgres"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self.answers, timeout=15, what="the private pgbouncer to answer")

    def repoint(self, upstream_port: int) -> None:
        """Send every new server connection to 127.0.0.1:`upstream_port`: the ini's
        [databases] entry rewritten, then RELOAD (PgBouncer closes the old server
        connections as they are released; clients keep theirs)."""
        self.upstream_port = upstream_port
        self._write_ini()
        self.admin("RELOAD")

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

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A command of the admin console (SHOW ..., RELOAD, ...), rows as dicts."""
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname="pgbouncer",
            autocommit=True,
            connect_timeout=5,
        ) as admin:
            cursor = admin.execute(command, prepare=False)
            if cursor.description is None:
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def show(self, what: str) -> list[dict[str, Any]]:
        """A SHOW command of the admin console, rows as dicts."""
        return self.admin(f"SHOW {what}")

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
