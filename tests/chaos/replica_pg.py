"""A primary and its synchronous standby, two private clusters, for the failover test.

The standby is a `pg_basebackup -R` copy of the primary streaming from it on another port of
127.0.0.1, through a fault proxy (the link between the two machines: `delay()` makes the
standby lag, `reset()` drops what is still in flight). Only after the copy does the primary
name it in `synchronous_standby_names` (ALTER SYSTEM), so the standby, once promoted, does
not wait for a standby of its own.
`synchronous_commit = on` (the default) then holds every COMMIT until the standby has flushed
its WAL: an acknowledged commit is on both, and promotion replays all of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from demo.procs import child_pids
from tests.chaos.private_pg import PrivatePostgres, _pg_bin
from tests.harness import wait_until
from tests.network.proxy import FaultProxy


class StandbyPostgres(PrivatePostgres):
    """A hot standby of `primary` on a port of its own; `promote()` makes it the primary."""

    def __init__(self, primary: PrivatePostgres, *, link: FaultProxy) -> None:
        super().__init__(dbname=primary.dbname)
        self.primary, self.link = primary, link

    def init(self) -> None:
        """pg_basebackup -R (primary_conninfo + standby.signal), then start streaming."""
        self._run(
            [
                _pg_bin("pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.link.port),  # -R writes it into primary_conninfo: WAL takes the link
                "-U",
                "postgres",
                "-D",
                str(self.datadir),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ]
        )
        with open(self.datadir / "postgresql.conf", "a") as conf:
            # The copied file names the primary's port and socket directory; the last wins.
            conf.write(f"\nport = {self.port}\nunix_socket_directories = '{self.root}'\n")
        self.start()

    def walreceiver_pid(self) -> int:
        """The process that takes the primary's WAL (SIGSTOP it to make the standby lag)."""
        return int(wait_until(lambda: self.psql("SELECT pid FROM pg_stat_wal_receiver")))

    def caught_up(self) -> bool:
        """The standby has replayed everything the primary wrote so far."""
        lsn = self.primary.psql("SELECT pg_current_wal_lsn()")
        return self.psql(f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn") == "t"

    def in_recovery(self) -> bool:
        return self.psql("SELECT pg_is_in_recovery()") == "t"

    def promote(self) -> None:
        """pg_ctl promote, waiting until the standby accepts writes."""
        self._run([_pg_bin("pg_ctl"), "-D", str(self.datadir), "-w", "-t", "60", "promote"])
        wait_until(lambda: not self.in_recovery(), timeout=60, what="the standby's promotion")


def make_synchronous(primary: PrivatePostgres) -> None:
    """Every commit on `primary` waits for a standby's flush, from now on."""
    wait_until(
        lambda: (
            primary.psql("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
            == "1"
        ),
        timeout=60,
        what="the standby to stream",
    )
    primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
    primary.psql("SELECT pg_reload_conf()")
    wait_until(
        lambda: primary.psql("SELECT sync_state FROM pg_stat_replication") == "sync",
        timeout=30,
        what="the standby to be synchronous",
    )
    assert primary.psql("SHOW synchronous_commit") == "on"


def crash(pg: PrivatePostgres) -> None:
    """The primary's machine dies: SIGKILL to the postmaster and every server process at once
    (no shutdown checkpoint, no last WAL sent); its System V segment is removed after."""
    lines = (pg.datadir / "postmaster.pid").read_text().splitlines()
    postmaster = int(lines[0])
    backends = child_pids(postmaster)
    for pid in [postmaster, *backends]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: not any(_alive(pid) for pid in [postmaster, *backends]),
        timeout=10,
        what="the primary's processes to die",
    )
    # The key and id line ("  5432001   32768"): a killed postmaster cannot remove it itself.
    if len(lines) > 6 and len(lines[6].split()) == 2:
        shm_id = lines[6].split()[1]
        subprocess.run(["ipcrm", "-m", shm_id], capture_output=True, timeout=10, check=False)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


@dataclass
class FailoverPair:
    """The two clusters and the libpq multi-host URL naming both, primary first."""

    primary: PrivatePostgres
    standby: StandbyPostgres
    link: FaultProxy

    @property
    def url(self) -> str:
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgres://postgres@{hosts}/{self.primary.dbname}?target_session_attrs=read-write"


@contextlib.contextmanager
def failover_pair(
    *, dbname: str = "dj_failover", synchronous: bool = True
) -> Iterator[FailoverPair]:
    """A primary with a (synchronous) standby; both stopped and removed at the end."""
    primary = PrivatePostgres(dbname=dbname)
    link = FaultProxy(("127.0.0.1", primary.port)).start()
    standby = StandbyPostgres(primary, link=link)
    try:
        primary.init()  # wal_level replica and initdb's pg_hba replication lines: the defaults
        standby.init()
        if synchronous:
            make_synchronous(primary)
        yield FailoverPair(primary=primary, standby=standby, link=link)
    finally:
        standby.close()
        link.close()
        primary.close()
