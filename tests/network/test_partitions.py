"""Bounded calls (DESIGN invariant 8) under a true partition: real processes in a host whose
path to PostgreSQL or Redis is cut in the kernel (no RST, no ICMP), bounds asserted.

The bounds come from the example project's settings (jobsite/settings.py, DATABASE_TIMEOUTS
and CELERY_BROKER_TRANSPORT_OPTIONS); docs/fault-matrix.md "Network" lists them per row.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

import jobs
from jobs.models import Job
from tests.chaos.private_pg import PrivatePostgres, private_postgres
from tests.harness import ROOT, PrivateRedis, Proc, broker_job_ids, wait_until
from tests.network.hosts import Client, HostHarness
from tests.network.netns import NETWORK_CIDR, Host, Network
from tests.network.proxy import fault_proxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

MARGIN = 2.0  # process scheduling and the kernel's timer granularity, not a second bound
PG = settings.DATABASE_TIMEOUTS
CONNECT_TIMEOUT = float(PG["connect_timeout"])
USER_TIMEOUT = PG["tcp_user_timeout"] / 1000
# A reply that never comes: keepalive probes from `idle` on, every `interval`; with a user
# timeout set the kernel gives up at the first probe past it (Linux tcp_keepalive_timer).
KEEPALIVE_BOUND = max(
    USER_TIMEOUT, PG["keepalives_idle"] + PG["keepalives_interval"] * PG["keepalives_count"]
)
BROKER = settings.CELERY_BROKER_TRANSPORT_OPTIONS
BRPOP_TIMEOUT = 1.0  # kombu's Redis transport default
# kombu drops a BRPOP whose reply is overdue by brpop_timeout + health_check_interval, checked
# every health_check_interval (kombu/transport/redis.py, maybe_check_brpop_health).
BROKER_NOTICE_BOUND = BRPOP_TIMEOUT + 2 * BROKER["health_check_interval"]
# After a loss Celery reconnects at once, then after 2 s, 4 s, ... (broker_connection_retry);
# a heal during the first attempt is seen by its next SYN, or by the retry 2 s after it timed
# out: connect timeout + 2 s at the most.
RECONNECT_BOUND = BROKER["socket_connect_timeout"] + 2.0

# Run with `manage.py shell -c` inside a host; JOBS_TEST_NET_ROLE says which call it makes.
PG_CLIENT = """
import os, sys, time
from django.db import connection
role = os.environ["JOBS_TEST_NET_ROLE"]
if role != "connect":
    connection.ensure_connection()
    print("connected", flush=True)
if role == "query":
    sys.stdin.readline()  # the test has cut the network
started = time.monotonic()
try:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(60)" if role == "in_flight" else "SELECT 1")
    outcome = "ok"
except Exception as error:
    outcome = "failed:" + type(error).__name__
print(outcome, round(time.monotonic() - started, 2), flush=True)
"""


def pg_client(host: Host, pg: PrivatePostgres, address: str, role: str) -> Client:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST")},
        "DJANGO_SETTINGS_MODULE": "jobsite.settings",
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": f"postgres://postgres@{address}:{pg.port}/{pg.dbname}",
        "JOBS_TEST_NET_ROLE": role,
    }
    argv = host.wrap([sys.executable, "manage.py", "shell", "-c", PG_CLIENT])
    popen = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return Client(popen)


@pytest.fixture
def network_pg(network: Network) -> Iterator[tuple[PrivatePostgres, str]]:
    address = network.service("pg")
    with private_postgres(dbname="dj_net", also_listen=(address,), trust=NETWORK_CIDR) as pg:
        yield pg, address


def test_postgres_calls__end_within_their_bounds__when_the_host_is_cut_off(
    network: Network, network_pg: tuple[PrivatePostgres, str]
) -> None:
    """A new connection, a query sent into the cut and a query whose reply the cut swallows
    each fail with OperationalError within their bound, instead of waiting on dead TCP."""
    pg, address = network_pg
    host = network.host()
    query, in_flight = (pg_client(host, pg, address, role) for role in ("query", "in_flight"))
    clients = [query, in_flight]
    try:
        for client in clients:
            client.line("connected", timeout=60)
        sleeping = "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'"
        wait_until(
            lambda: pg.psql(sleeping) == "1",
            timeout=10,
            what="the in-flight query to run on the server",
        )
        host.blackhole()
        cut_at = time.monotonic()
        connect = pg_client(host, pg, address, "connect")
        clients.append(connect)
        assert query.popen.stdin
        query.popen.stdin.write("go\n")
        query.popen.stdin.flush()

        deadline = KEEPALIVE_BOUND + 15  # past every bound: a hang fails here, not at 300 s
        _, connect_outcome, connect_seconds = connect.outcome(timeout=deadline + 10)
        _, query_outcome, query_seconds = query.outcome(timeout=deadline)
        in_flight_at, in_flight_outcome, _ = in_flight.outcome(timeout=deadline)
    finally:
        for client in clients:
            client.popen.kill()
            client.popen.wait(timeout=10)

    print(
        f"postgres cut: connect {connect_seconds:.1f}s, query {query_seconds:.1f}s, "
        f"in-flight reply {in_flight_at - cut_at:.1f}s"
    )
    assert connect_outcome == "failed:OperationalError"
    # It waited (no RST, no ICMP), and no longer than connect_timeout.
    assert CONNECT_TIMEOUT - 0.5 <= connect_seconds <= CONNECT_TIMEOUT + MARGIN
    assert query_outcome == "failed:OperationalError"
    assert USER_TIMEOUT - 1 <= query_seconds <= USER_TIMEOUT + MARGIN
    assert in_flight_outcome == "failed:OperationalError"
    assert in_flight_at - cut_at <= KEEPALIVE_BOUND + MARGIN


BROKER_TROUBLE = (
    "Redis BRPOP got no reply",
    "Connection to broker lost",
    "Cannot connect to redis",
)


def broker_trouble(worker: Proc, since: int) -> str:
    return next((m for m in BROKER_TROUBLE if m in worker.log()[since:]), "")


def job_succeeded(job: Job) -> bool:
    return Job.objects.get(pk=job.pk).state == "succeeded"


def test_worker__notices_a_cut_broker_within_its_bound_and_consumes_again_after_heal(
    network: Network, user: Any, network_redis: PrivateRedis, settings: Any
) -> None:
    """Redis cut off from the worker's host (PostgreSQL still reachable): the worker's main
    loop drops the dead BRPOP within brpop_timeout + 2 x health_check_interval and keeps
    reconnecting; after the heal it takes the job submitted during the cut."""
    redis_address, pg_address = network.service("redis"), network.service("pg")
    redis = network_redis  # this process submits to it over loopback
    db = connection.settings_dict
    workdir = Path(tempfile.mkdtemp(prefix="jobs-net-"))
    (workdir / "media").mkdir()
    settings.MEDIA_ROOT = workdir / "media"
    with fault_proxy(
        (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)), host=pg_address
    ) as pg_proxy:
        harness = HostHarness(
            broker_url=f"redis://{redis_address}:{redis.port}/0",
            database_url=f"postgres://postgres@{pg_address}:{pg_proxy.port}/{db['NAME']}",
            workdir=workdir,
            media_root=workdir / "media",
        )
        harness.host = host = network.host()
        try:
            worker = harness.start_worker("netw1")
            first = jobs.submit(kind="noop", input={}, owner=user)
            wait_until(lambda: job_succeeded(first), timeout=30, what="a job before the cut")

            since = len(worker.log())
            host.blackhole("redis")
            cut_at = time.monotonic()
            seen = wait_until(
                lambda: broker_trouble(worker, since),
                timeout=BROKER_NOTICE_BOUND + 20,
                what="the worker to notice the cut broker",
            )
            noticed = time.monotonic() - cut_at
            during = jobs.submit(kind="noop", input={}, owner=user)
            assert str(during.pk) in broker_job_ids(redis.url)  # waiting, not consumed
            assert worker.alive()

            host.heal("redis")
            healed_at = time.monotonic()
            wait_until(lambda: job_succeeded(during), timeout=60, what="a job after heal")
            recovered = time.monotonic() - healed_at
        finally:
            harness.stop_all()
    print(f"broker cut: {seen!r} after {noticed:.1f}s; a job ran {recovered:.1f}s after heal")
    assert noticed <= BROKER_NOTICE_BOUND + MARGIN
    assert recovered <= RECONNECT_BOUND + MARGIN
