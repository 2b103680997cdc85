"""A PostgreSQL failover loses no accepted job: a primary with a synchronous standby, load
running, the primary's machine killed and the standby promoted.

Every process (the production web server, two workers, the relay, beat's maintenance) gets one
libpq multi-host DATABASE_URL naming both clusters with `target_session_attrs=read-write`, so
each new connection lands on whichever of them accepts writes. Clients POST chaos.notify jobs
(one notice through the effect ledger to the provider) over HTTP the whole time. After the
promotion every job that got a 202 must be on the new primary and end succeeded, with one
notice each at the provider; a submit that was cut got an error, never a 202 for a job that
is then missing. A process plays beat's part (the reaper and the redelivery check, at their
default intervals); no reconciler runs, so no job may wait for one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.failover_load import (
    KINDS,
    assert_every_accepted_job_ran_once,
    check_on,
    failover_under_load,
    harness_on,
    post_job,
)
from tests.chaos.replica_pg import FailoverPair, crash, failover_pair
from tests.harness import Harness, PrivateRedis, wait_until
from tests.production_server import production_server

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

# The bound on recovery, from the kill to every job accepted before it succeeded: the
# promotion (< 1 s here), a worker's gate probing every 1 s until the new primary answers,
# the web pool's reconnect backoff (1, 2, 4 s...), a lease cut short (3 s for chaos.notify)
# reaped within the reaper's 5 s, a claim the old primary had not replicated (claims commit
# asynchronously) republished by the redelivery check (deadline >= 5 s, every 2 s), and the
# backlog on four pool processes. Measured 4-12 s; 60 s is far below the reconciler's 300 s.
RECOVERY_BOUND = 60.0


@pytest.fixture
def pair() -> Iterator[FailoverPair]:
    with failover_pair(dbname="dj_failover") as made:
        yield made


@pytest.fixture
def failover_harness(pair: FailoverPair, session_redis: PrivateRedis) -> Iterator[Harness]:
    with harness_on(pair, session_redis) as harness:
        yield harness


@pytest.mark.timeout(240)
def test_failover_to_synchronous_standby__every_accepted_job_runs_once(
    pair: FailoverPair, failover_harness: Harness, production_static: Path
) -> None:
    run = failover_under_load(
        failover_harness, pair, production_static, recovery_bound=RECOVERY_BOUND
    )
    print(run.summary("failover"))
    assert_every_accepted_job_ran_once(run, recovery_bound=RECOVERY_BOUND)


LAGGED_JOBS = 5


@pytest.fixture
def async_pair() -> Iterator[FailoverPair]:
    with failover_pair(dbname="dj_failover_async", synchronous=False) as made:
        yield made


@pytest.mark.timeout(180)
def test_failover_to_asynchronous_standby__loses_jobs_that_got_a_202(
    async_pair: FailoverPair, session_redis: PrivateRedis, production_static: Path
) -> None:
    """Why the docs ask for a synchronous standby: the commits the primary acknowledged
    while its standby lagged are not on the standby it fails over to."""
    pair = async_pair
    with (
        harness_on(pair, session_redis) as harness,
        production_server(
            harness, production_static, JOBS_HANDLER_MODULES=KINDS, JOBS_THROTTLE_USER="off"
        ) as web,
    ):
        token = harness.manage("jobs_token", "failover").stdout.strip()
        wait_until(pair.standby.caught_up, timeout=30, what="the standby to catch up")
        pair.link.delay(10_000)  # the standby lags: a slow link, a busy disk, a long query
        outcomes = [post_job(web, token) for _ in range(LAGGED_JOBS)]
        crash(pair.primary)
        pair.link.reset()  # what was still on its way dies with the primary's machine
        pair.standby.promote()
        report = check_on(harness, pair, {job for _, job in outcomes if job}, provider=False)

    assert [outcome for outcome, _ in outcomes] == ["202"] * LAGGED_JOBS
    lost = [v for v in report["violations"] if "has no row (lost acceptance)" in v]
    assert len(lost) == LAGGED_JOBS, report["violations"]
    assert report["jobs"] == 0  # nor anything else of theirs: the job and its outbox row
