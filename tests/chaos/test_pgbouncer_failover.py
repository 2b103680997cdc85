"""A PostgreSQL failover behind PgBouncer loses no accepted job: web, workers, the relay and
beat's maintenance reach PostgreSQL only through one private PgBouncer in transaction mode
(prepared statements kept, as tests/integration/test_pgbouncer.py runs it); the primary, with
a synchronous standby (tests/chaos/replica_pg.py), is killed under HTTP load and the standby
promoted. Then the operator's step: the PgBouncer's `[databases]` entry is rewritten to the
new primary and PgBouncer told to `RELOAD` (no restart: clients keep their connections to
the pooler). Every job that got a 202 runs once (tests/chaos/checker.py on the new primary),
none waits for the reconciler.

Run twice: with PgBouncer's default `server_login_retry` (15 s) and with 1 s. After its first
failed login to the dead primary PgBouncer waits `server_login_retry` before it connects
again, RELOAD or not: that pause is most of the time to recover, so the docs tell operators
to lower it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.failover_load import (
    assert_every_accepted_job_ran_once,
    failover_under_load,
    harness_on,
)
from tests.chaos.replica_pg import FailoverPair, failover_pair
from tests.harness import Harness, PrivateRedis
from tests.pgbouncer import PrivatePgBouncer, pgbouncer_or_skip

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

POOL_SIZE = 10  # server connections for ~15 clients: statements still move between them
# The bound on recovery, from the kill to every job accepted before it succeeded: the
# multi-host failover's (tests/chaos/test_failover.py: promotion, gate probes every 1 s,
# reaped leases, a lost claim republished after its delivery deadline), plus the repoint
# (an admin command) and PgBouncer's pause after the failed logins to the dead primary
# (server_login_retry, 15 s by default) before it connects to the new one.
RECOVERY_BOUND = 60.0
# The first job after the kill: PgBouncer's pause (server_login_retry), then a worker's gate
# probe (every 1 s) and one claim and completion on the new primary; the rest is margin for
# a loaded machine.
FIRST_JOB_MARGIN = 5.0


@pytest.fixture
def pair() -> Iterator[FailoverPair]:
    with failover_pair(dbname="dj_pgb_failover") as made:
        yield made


# The pooler before the harness: fixtures are torn down in reverse, so every process that
# connects through it is stopped first.
@pytest.fixture(params=[15, 1], ids=["server_login_retry=15", "server_login_retry=1"])
def pooler(pair: FailoverPair, request: pytest.FixtureRequest) -> Iterator[PrivatePgBouncer]:
    """Transaction pooling in front of the primary, `server_login_retry` the default (15 s)
    or lowered to 1 s."""
    server = PrivatePgBouncer(
        pgbouncer_or_skip(),
        max_prepared_statements=200,
        pool_size=POOL_SIZE,
        upstream_port=pair.primary.port,
        settings={"server_login_retry": str(request.param)},
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pooled_harness(
    pair: FailoverPair, pooler: PrivatePgBouncer, session_redis: PrivateRedis
) -> Iterator[Harness]:
    """Migrated on the primary directly; every process it starts connects through the pooler."""
    with harness_on(pair, session_redis) as harness:
        harness.database_url = pooler.url(pair.primary.dbname)
        yield harness


def _server_ports(pooler: PrivatePgBouncer, dbname: str) -> set[int]:
    """The PostgreSQL port of each server connection PgBouncer holds for `dbname`."""
    return {int(row["port"]) for row in pooler.show("SERVERS") if row["database"] == dbname}


def _login_retry(pooler: PrivatePgBouncer) -> int:
    return int(pooler.settings["server_login_retry"])


@pytest.mark.timeout(240)
def test_failover_behind_pgbouncer_repointed_and_reloaded__every_accepted_job_runs_once(
    pair: FailoverPair,
    pooler: PrivatePgBouncer,
    pooled_harness: Harness,
    production_static: Path,
) -> None:
    dbname = pair.primary.dbname

    def repoint() -> None:
        pooler.repoint(pair.standby.port)

    run = failover_under_load(
        pooled_harness, pair, production_static, recovery_bound=RECOVERY_BOUND, repoint=repoint
    )
    entry = next(row for row in pooler.show("DATABASES") if row["name"] == dbname)
    servers = _server_ports(pooler, dbname)
    stats = next(row for row in pooler.show("STATS") if row["database"] == dbname)
    print(run.summary("failover behind pgbouncer"))
    print(
        f"pgbouncer (server_login_retry {_login_retry(pooler)} s) after: entry port "
        f"{entry['port']}, server ports {sorted(servers)}"
    )
    assert_every_accepted_job_ran_once(run, recovery_bound=RECOVERY_BOUND)
    assert run.first_success <= _login_retry(pooler) + FIRST_JOB_MARGIN
    assert int(entry["port"]) == pair.standby.port
    assert servers <= {pair.standby.port}  # nothing left on the old primary
    assert stats["total_bind_count"] > 0  # prepared statements went through the pooler
    assert pooler.proc is not None and pooler.proc.poll() is None  # reloaded, not restarted
