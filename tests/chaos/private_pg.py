"""A PostgreSQL cluster of our own, so chaos can restart it without touching the shared server.

initdb refuses to run as root, so every cluster command runs as the `postgres` OS user
(`runuser -u postgres --`) when we are root. The cluster lives in a temp dir on a free port
and is removed by `close()`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.harness import free_port, wait_until


def _pg_bin(name: str) -> str:
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if candidates:
        return candidates[-1]
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found: install PostgreSQL server binaries")
    return found


class PrivatePostgres:
    """initdb + pg_ctl in a temp dir on a free port; restartable, always removable."""

    def __init__(
        self, *, dbname: str = "dj_chaos", also_listen: tuple[str, ...] = (), trust: str = ""
    ) -> None:
        self.port = free_port()
        self.dbname = dbname
        # Addresses besides 127.0.0.1, and the network its clients there come from (CIDR):
        # the hosts of tests/network.
        self.also_listen, self.trust = also_listen, trust
        self.root = Path(tempfile.mkdtemp(prefix="jobs-pg-"))
        self.datadir = self.root / "data"
        self.logfile = self.root / "postgres.log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, user="postgres", group="postgres")
            os.chmod(self.root, 0o755)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.dbname}"

    def _run(self, argv: list[str], *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)

    def init(self) -> None:
        """initdb, start, create the database."""
        self._run(
            [
                _pg_bin("initdb"),
                "-D",
                str(self.datadir),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )
        listen = ["127.0.0.1", *self.also_listen]
        if self.trust:
            with open(self.datadir / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {self.trust} trust\n")
        with open(self.datadir / "postgresql.conf", "a") as conf:
            # fsync off is safe here: we crash PostgreSQL, never the OS. synchronous_commit
            # stays on: with it off an acknowledged commit can vanish in a crash, which is
            # exactly the lost acceptance the checker looks for.
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '{','.join(listen)}'\n"
                f"unix_socket_directories = '{self.root}'\nmax_connections = 200\n"
                "fsync = off\nfull_page_writes = off\n"
            )
        self.start()
        self._run(
            [
                _pg_bin("createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                self.dbname,
            ]
        )

    def start(self) -> None:
        self._run(
            [
                _pg_bin("pg_ctl"),
                "-D",
                str(self.datadir),
                "-l",
                str(self.logfile),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        wait_until(self.ready, timeout=60, what="private postgres to accept connections")

    def stop(self, *, mode: str = "fast") -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run([_pg_bin("pg_ctl"), "-D", str(self.datadir), "-m", mode, "-w", "stop"])

    def postmaster_pid(self) -> int:
        """The running postmaster's pid (the first line of its datadir's postmaster.pid)."""
        return int((self.datadir / "postmaster.pid").read_text().split()[0])

    def restart(self, *, mode: str = "immediate", down_seconds: float = 0.0) -> None:
        """Stop (immediate = a crash: no checkpoint, every backend killed), then start."""
        self.stop(mode=mode)
        if down_seconds:
            time.sleep(down_seconds)  # the outage itself is the fault being injected
        self.start()

    def ready(self) -> bool:
        result = subprocess.run(
            [_pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
            capture_output=True,
            timeout=10,
        )
        return result.returncode == 0

    def psql(self, sql: str) -> str:
        result = subprocess.run(
            [
                _pg_bin("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                self.dbname,
                "-tAc",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return result.stdout.strip()

    def terminate_backends(self, *, application_prefix: str) -> int:
        """pg_terminate_backend every connection whose application_name has the prefix."""
        out = self.psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE datname = '{self.dbname}' AND application_name LIKE '{application_prefix}%' "
            "AND pid <> pg_backend_pid()"
        )
        return int(out or 0)

    def close(self) -> None:
        self.stop(mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_postgres(
    *, dbname: str = "dj_chaos", also_listen: tuple[str, ...] = (), trust: str = ""
) -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres(dbname=dbname, also_listen=also_listen, trust=trust)
    try:
        pg.init()
        yield pg
    finally:
        pg.close()
