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

import contextlib
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobs.states import FINISHED
from tests.chaos.private_pg import PrivatePostgres
from tests.chaos.replica_pg import FailoverPair, crash, failover_pair
from tests.conftest import redis_flushall
from tests.harness import ROOT, Harness, PrivateRedis, Proc, harness_for, wait_until
from tests.production_server import PROXY_HEADERS, ProductionServer, production_server

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

KINDS = "tests.kinds_chaos"
SUBMITTERS = 3
WARM_JOBS = 30  # succeeded before the kill: web and workers hold live connections
AFTER_JOBS = 30  # accepted after the promotion: web takes writes on the new primary
# The bound on recovery, from the kill to every job accepted before it succeeded: the
# promotion (< 1 s here), a worker's gate probing every 1 s until the new primary answers,
# the web pool's reconnect backoff (1, 2, 4 s...), a lease cut short (3 s for chaos.notify)
# reaped within the reaper's 5 s, a claim the old primary had not replicated (claims commit
# asynchronously) republished by the redelivery check (deadline >= 5 s, every 2 s), and the
# backlog on four pool processes. Measured 4-12 s; 60 s is far below the reconciler's 300 s.
RECOVERY_BOUND = 60.0

# What beat runs, at its default intervals, but the reconciler (300 s): the reaper (expired
# leases) and the redelivery check (a published job nobody claimed within its deadline).
MAINTENANCE = """
import time, django
django.setup()
from django.db import connection
from jobs.conf import jobs_settings
from jobs.ops.redeliver import redeliver_run
from jobs.reaper import jobs_reap
every = {jobs_reap: jobs_settings.REAP_INTERVAL, redeliver_run: jobs_settings.REDELIVER_INTERVAL}
due = dict.fromkeys(every, 0.0)
while True:
    for task, interval in every.items():
        if time.monotonic() >= due[task]:
            due[task] = time.monotonic() + interval
            try:
                task()
            except Exception as exc:  # the database is failing over: say so, try again
                print(f"{task.__name__} error: {type(exc).__name__}: {exc}", flush=True)
                connection.close()
    time.sleep(0.1)
"""

CHECK = """
import json, sys
from tests.chaos.checker import check_run
from tests.kinds_chaos import EXPECTED
given = json.load(open(sys.argv[1]))
report = check_run(accepted=set(given["accepted"]), expected=EXPECTED,
                   provider=given["provider"], require_fences=False)
print(json.dumps(report.as_dict()))
"""


@dataclass
class Submits:
    """What the clients saw: each 202's job id and when it came; every other outcome."""

    accepted: dict[str, float] = field(default_factory=dict)
    errors: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    def ids(self) -> list[str]:
        with self.lock:
            return list(self.accepted)

    def accepted_since(self, since: float) -> int:
        with self.lock:
            return sum(1 for at in self.accepted.values() if at > since)


@pytest.fixture
def pair() -> Iterator[FailoverPair]:
    with failover_pair(dbname="dj_failover") as made:
        yield made


@pytest.fixture
def failover_harness(pair: FailoverPair, session_redis: PrivateRedis) -> Iterator[Harness]:
    with _harness_on(pair, session_redis) as harness:
        yield harness


@contextlib.contextmanager
def _harness_on(pair: FailoverPair, session_redis: PrivateRedis) -> Iterator[Harness]:
    """The harness with both clusters as its database, migrated on the primary."""
    redis_flushall(session_redis.port)
    with harness_for(session_redis.url) as harness:
        harness.database_url = pair.url
        harness.manage("migrate", "--noinput", "-v", "0")
        yield harness


def _post_job(web: ProductionServer, token: str) -> tuple[str, str | None]:
    """One submit over HTTP: (the status or the exception's name, the job id of a 202)."""
    headers = {
        **PROXY_HEADERS,
        "Authorization": f"Token {token}",
        "Content-Type": "application/json",
    }
    body = json.dumps({"kind": "chaos.notify", "input": {"before": 0.05, "after": 0.05}})
    conn = web.connection(timeout=20)
    try:
        conn.request("POST", "/api/jobs/", body=body, headers=headers)
        response = conn.getresponse()
        payload = response.read()
    except (OSError, http.client.HTTPException) as exc:
        return type(exc).__name__, None
    finally:
        conn.close()
    if response.status != 202:
        return str(response.status), None
    return "202", str(json.loads(payload)["id"])


def _submit_loop(web: ProductionServer, token: str, submits: Submits) -> None:
    while not submits.stop.is_set():
        outcome, job_id = _post_job(web, token)
        with submits.lock:
            if job_id is not None:
                submits.accepted[job_id] = time.monotonic()
                continue
            submits.errors.append((time.monotonic(), outcome))
        submits.stop.wait(0.05)  # a failing server is not hammered


def _succeeded(pg_port: int, dbname: str, ids: list[str], *, after: float | None = None) -> int:
    """How many of `ids` (or, with `after`, of every job finished after that epoch time)
    succeeded, on the cluster at `pg_port`."""
    with psycopg.connect(
        host="127.0.0.1", port=pg_port, dbname=dbname, user="postgres", connect_timeout=5
    ) as conn:
        if after is not None:
            sql = "SELECT count(*) FROM jobs_job WHERE state = 'succeeded' AND finished_at > "
            row = conn.execute(sql + "to_timestamp(%s)", [after]).fetchone()
        else:
            sql = "SELECT count(*) FROM jobs_job WHERE state = 'succeeded' AND id = ANY(%s)"
            row = conn.execute(sql, [ids]).fetchone()
    return int(row[0]) if row else 0


def _states(pg: PrivatePostgres, ids: list[str]) -> dict[str, int]:
    """The accepted jobs by state on `pg` ("missing": no row)."""
    with psycopg.connect(
        host="127.0.0.1", port=pg.port, dbname=pg.dbname, user="postgres", connect_timeout=5
    ) as conn:
        sql = "SELECT state, count(*) FROM jobs_job WHERE id = ANY(%s) GROUP BY state"
        found = {str(state): int(n) for state, n in conn.execute(sql, [ids]).fetchall()}
    found["missing"] = len(ids) - sum(found.values())
    return found


def _stories(pg: PrivatePostgres, ids: list[str], procs: list[Proc]) -> str:
    """For each job that did not succeed (accepted first): its row, trail, outbox rows and
    log lines."""
    with psycopg.connect(
        host="127.0.0.1", port=pg.port, dbname=pg.dbname, user="postgres", connect_timeout=5
    ) as conn:
        sql = "SELECT id::text FROM jobs_job WHERE id = ANY(%s) AND state <> 'succeeded'"
        stuck = [str(row[0]) for row in conn.execute(sql, [ids]).fetchall()]
        sql = "SELECT id::text FROM jobs_job WHERE NOT id = ANY(%s) AND state <> 'succeeded'"
        stuck += [str(row[0]) for row in conn.execute(sql, [ids]).fetchall()]
        stories = []
        for job in stuck[:3]:
            queries = [
                "SELECT state, generation, attempt, lease_until FROM jobs_job WHERE id = %s",
                "SELECT from_state, to_state, generation, worker, reason FROM jobs_jobevent "
                "WHERE job_id = %s ORDER BY id",
                "SELECT id, published_at, publish_attempts, last_error FROM outbox_outboxentry "
                "WHERE job_id = %s ORDER BY id",
            ]
            rows = [conn.execute(q, [job]).fetchall() for q in queries]
            lines = [ln for p in procs for ln in p.log().splitlines() if job in ln]
            stories.append(f"job {job}: {rows}\n" + "\n".join(lines[-20:]))
    return "\n".join(stories)


def _unfinished(pg: PrivatePostgres) -> int:
    finished = ", ".join(f"'{state.value}'" for state in FINISHED)
    return int(pg.psql(f"SELECT count(*) FROM jobs_job WHERE state NOT IN ({finished})"))


def _redelivered(pg: PrivatePostgres) -> int:
    """Jobs the redelivery check published again (their message was acked or lost)."""
    return int(
        pg.psql("SELECT count(DISTINCT job_id) FROM jobs_jobevent WHERE actor = 'redeliverer'")
    )


def _check(
    harness: Harness, pair: FailoverPair, accepted: set[str], *, provider: bool = True
) -> dict[str, Any]:
    """tests.chaos.checker on the new primary, in a process whose database it is."""
    given = harness.workdir / "accepted.json"
    stats = harness.provider_stats() if provider else None
    given.write_text(json.dumps({"accepted": sorted(accepted), "provider": stats}))
    env = harness.base_env(DATABASE_URL=pair.standby.url, JOBS_HANDLER_MODULES=KINDS)
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + CHECK, str(given)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(240)
def test_failover_to_synchronous_standby__every_accepted_job_runs_once(
    pair: FailoverPair, failover_harness: Harness, production_static: Path
) -> None:
    harness = failover_harness
    token = harness.manage("jobs_token", "failover").stdout.strip()
    harness.start_provider()
    worker_env = {"JOBS_HANDLER_MODULES": KINDS, "NOTIFY_PROVIDER_TIMEOUT": "1"}
    workers = [harness.start_worker(f"fo-w{i}", concurrency=2, **worker_env) for i in (1, 2)]
    harness.start_relay(interval=0.2)
    beat = harness.spawn(
        "beat", [sys.executable, "-c", MAINTENANCE], harness.base_env(**worker_env)
    )
    submits = Submits()
    with production_server(
        harness, production_static, JOBS_HANDLER_MODULES=KINDS, JOBS_THROTTLE_USER="off"
    ) as web:
        clients = [
            threading.Thread(target=_submit_loop, args=(web, token, submits), daemon=True)
            for _ in range(SUBMITTERS)
        ]
        for client in clients:
            client.start()
        try:
            wait_until(
                lambda: (
                    _succeeded(pair.primary.port, pair.primary.dbname, submits.ids()) >= WARM_JOBS
                ),
                timeout=60,
                what=f"{WARM_JOBS} jobs to succeed before the kill",
            )
            killed_wall, killed = time.time(), time.monotonic()
            crash(pair.primary)
            pair.standby.promote()
            promoted = time.monotonic()
            wait_until(
                lambda: _succeeded(pair.standby.port, pair.standby.dbname, [], after=killed_wall),
                timeout=RECOVERY_BOUND,
                what="a job to succeed on the new primary",
            )
            first_success = time.monotonic()
            # The old primary is gone: these 202s prove the web server's new connections
            # found the promoted standby.
            wait_until(
                lambda: submits.accepted_since(promoted) >= AFTER_JOBS,
                timeout=RECOVERY_BOUND,
                what=f"{AFTER_JOBS} submits accepted by the new primary",
            )
        finally:
            submits.stop.set()
            for client in clients:
                client.join(timeout=30)

    with submits.lock:
        accepted = dict(submits.accepted)
        errors = list(submits.errors)
    before_kill = [job for job, at in accepted.items() if at <= killed]
    try:
        wait_until(
            lambda: (
                _succeeded(pair.standby.port, pair.standby.dbname, before_kill) == len(before_kill)
            ),
            timeout=RECOVERY_BOUND,
            what=f"the {len(before_kill)} jobs accepted before the kill",
        )
        whole_before = time.monotonic()
        # Every accepted job, and any a cut submit committed without its 202 (its client may
        # retry it with the same Idempotency-Key): all of them run.
        wait_until(
            lambda: (
                _succeeded(pair.standby.port, pair.standby.dbname, list(accepted)) == len(accepted)
                and _unfinished(pair.standby) == 0
            ),
            timeout=RECOVERY_BOUND,
            what=f"all {len(accepted)} accepted jobs and every other job",
        )
    except AssertionError as exc:
        stories = _stories(pair.standby, list(accepted), [*workers, beat, web.proc])
        raise AssertionError(f"{exc}: {_states(pair.standby, list(accepted))}\n{stories}") from None
    drained = time.monotonic()

    report = _check(harness, pair, set(accepted))
    cut = [outcome for at, outcome in errors if at > killed]
    print(
        f"\nfailover: promoted {promoted - killed:.2f}s after the kill; first job succeeded "
        f"{first_success - killed:.2f}s after it; every job accepted before it succeeded "
        f"{whole_before - killed:.2f}s after it; all {len(accepted)} accepted and any other "
        f"job finished "
        f"{drained - killed:.2f}s after it. {len(cut)} submits refused during the failover "
        f"({sorted(set(cut))}), {report['jobs'] - len(accepted)} jobs committed without a 202, "
        f"{report['provider_requests']} provider requests for {report['notices']} notices, "
        f"{_redelivered(pair.standby)} jobs republished by the redelivery check"
    )
    assert report["ok"], report["violations"]
    assert report["jobs"] >= len(accepted)
    assert report["notices"] == report["states"].get("succeeded", 0)
    assert report["reconciler_requeues"] == 0
    assert whole_before - killed < RECOVERY_BOUND
    assert all(w.alive() for w in workers)


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
        _harness_on(pair, session_redis) as harness,
        production_server(
            harness, production_static, JOBS_HANDLER_MODULES=KINDS, JOBS_THROTTLE_USER="off"
        ) as web,
    ):
        token = harness.manage("jobs_token", "failover").stdout.strip()
        wait_until(pair.standby.caught_up, timeout=30, what="the standby to catch up")
        pair.link.delay(10_000)  # the standby lags: a slow link, a busy disk, a long query
        outcomes = [_post_job(web, token) for _ in range(LAGGED_JOBS)]
        crash(pair.primary)
        pair.link.reset()  # what was still on its way dies with the primary's machine
        pair.standby.promote()
        report = _check(harness, pair, {job for _, job in outcomes if job}, provider=False)

    assert [outcome for outcome, _ in outcomes] == ["202"] * LAGGED_JOBS
    lost = [v for v in report["violations"] if "has no row (lost acceptance)" in v]
    assert len(lost) == LAGGED_JOBS, report["violations"]
    assert report["jobs"] == 0  # nor anything else of theirs: the job and its outbox row
