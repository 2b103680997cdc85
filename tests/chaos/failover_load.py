"""A PostgreSQL failover under load, for tests/chaos/test_failover.py (multi-host URLs) and
tests/chaos/test_pgbouncer_failover.py (PgBouncer repointed): HTTP submitters, beat's
maintenance without the reconciler, counts and stories read straight from a cluster, the
chaos checker run on the new primary (`failover_under_load`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from jobs.states import FINISHED
from tests.chaos.private_pg import PrivatePostgres
from tests.chaos.replica_pg import FailoverPair, crash
from tests.conftest import redis_flushall
from tests.harness import ROOT, Harness, PrivateRedis, Proc, harness_for, wait_until
from tests.production_server import PROXY_HEADERS, ProductionServer, production_server

KINDS = "tests.kinds_chaos"


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


@contextlib.contextmanager
def harness_on(pair: FailoverPair, session_redis: PrivateRedis) -> Iterator[Harness]:
    """The harness with both clusters as its database, migrated on the primary."""
    redis_flushall(session_redis.port)
    with harness_for(session_redis.url) as harness:
        harness.database_url = pair.url
        harness.manage("migrate", "--noinput", "-v", "0")
        yield harness


def post_job(web: ProductionServer, token: str) -> tuple[str, str | None]:
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


def submit_loop(web: ProductionServer, token: str, submits: Submits) -> None:
    while not submits.stop.is_set():
        outcome, job_id = post_job(web, token)
        with submits.lock:
            if job_id is not None:
                submits.accepted[job_id] = time.monotonic()
                continue
            submits.errors.append((time.monotonic(), outcome))
        submits.stop.wait(0.05)  # a failing server is not hammered


def succeeded_count(
    pg_port: int, dbname: str, ids: list[str], *, after: float | None = None
) -> int:
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


def job_states(pg: PrivatePostgres, ids: list[str]) -> dict[str, int]:
    """The accepted jobs by state on `pg` ("missing": no row)."""
    with psycopg.connect(
        host="127.0.0.1", port=pg.port, dbname=pg.dbname, user="postgres", connect_timeout=5
    ) as conn:
        sql = "SELECT state, count(*) FROM jobs_job WHERE id = ANY(%s) GROUP BY state"
        found = {str(state): int(n) for state, n in conn.execute(sql, [ids]).fetchall()}
    found["missing"] = len(ids) - sum(found.values())
    return found


def job_stories(pg: PrivatePostgres, ids: list[str], procs: list[Proc]) -> str:
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


def unfinished(pg: PrivatePostgres) -> int:
    finished = ", ".join(f"'{state.value}'" for state in FINISHED)
    return int(pg.psql(f"SELECT count(*) FROM jobs_job WHERE state NOT IN ({finished})"))


def redelivered(pg: PrivatePostgres) -> int:
    """Jobs the redelivery check published again (their message was acked or lost)."""
    return int(
        pg.psql("SELECT count(DISTINCT job_id) FROM jobs_jobevent WHERE actor = 'redeliverer'")
    )


def check_on(
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


SUBMITTERS = 3
WARM_JOBS = 30  # succeeded before the kill: web and workers hold live connections
AFTER_JOBS = 30  # accepted after the promotion: web takes writes on the new primary


@dataclass
class FailoverRun:
    """What one failover under load showed; times are seconds after the kill."""

    accepted: dict[str, float]
    errors: list[tuple[float, str]]
    report: dict[str, Any]
    promoted: float
    repointed: float | None
    first_success: float
    whole_before: float
    drained: float
    redelivered: int
    workers: list[Proc]

    def summary(self, label: str) -> str:
        cut = sorted({outcome for _, outcome in self.errors})
        repointed = "" if self.repointed is None else f", repointed {self.repointed:.2f}s"
        return (
            f"\n{label}: promoted {self.promoted:.2f}s after the kill{repointed}; first job "
            f"succeeded {self.first_success:.2f}s after it; every job accepted before it "
            f"succeeded {self.whole_before:.2f}s after it; all {len(self.accepted)} accepted "
            f"and any other job finished {self.drained:.2f}s after it. {len(self.errors)} "
            f"submits refused during the failover ({cut}), "
            f"{self.report['jobs'] - len(self.accepted)} jobs committed without a 202, "
            f"{self.report['provider_requests']} provider requests for "
            f"{self.report['notices']} notices, {self.redelivered} jobs republished by the "
            "redelivery check"
        )


def failover_under_load(
    harness: Harness,
    pair: FailoverPair,
    production_static: Path,
    *,
    recovery_bound: float,
    repoint: Callable[[], None] | None = None,
) -> FailoverRun:
    """Workers, relay, beat's maintenance and the production web server on `harness`'s
    database URL, HTTP submitters the whole time; the primary crashed once WARM_JOBS
    succeeded, the standby promoted at once, then `repoint()` (an operator's step, if the
    processes do not follow the primary themselves). Waits, within `recovery_bound` each,
    for AFTER_JOBS accepted by the new primary and for every job to finish; then runs the
    checker on the new primary."""
    token = harness.manage("jobs_token", "failover").stdout.strip()
    harness.start_provider()
    worker_env = {"JOBS_HANDLER_MODULES": KINDS, "NOTIFY_PROVIDER_TIMEOUT": "1"}
    workers = [harness.start_worker(f"fo-w{i}", concurrency=2, env=worker_env) for i in (1, 2)]
    harness.start_relay(interval=0.2)
    beat = harness.spawn(
        "beat", [sys.executable, "-c", MAINTENANCE], harness.base_env(**worker_env)
    )
    submits = Submits()
    repointed: float | None = None
    with production_server(
        harness, production_static, JOBS_HANDLER_MODULES=KINDS, JOBS_THROTTLE_USER="off"
    ) as web:
        clients = [
            threading.Thread(target=submit_loop, args=(web, token, submits), daemon=True)
            for _ in range(SUBMITTERS)
        ]
        for client in clients:
            client.start()
        try:
            wait_until(
                lambda: (
                    succeeded_count(pair.primary.port, pair.primary.dbname, submits.ids())
                    >= WARM_JOBS
                ),
                timeout=60,
                what=f"{WARM_JOBS} jobs to succeed before the kill",
            )
            killed_wall, killed = time.time(), time.monotonic()
            crash(pair.primary)
            pair.standby.promote()
            promoted = time.monotonic()
            if repoint is not None:
                repoint()
                repointed = time.monotonic() - killed
            wait_until(
                lambda: succeeded_count(
                    pair.standby.port, pair.standby.dbname, [], after=killed_wall
                ),
                timeout=recovery_bound,
                what="a job to succeed on the new primary",
            )
            first_success = time.monotonic()
            # The old primary is gone: these 202s prove the web server's new connections
            # found the promoted standby.
            wait_until(
                lambda: submits.accepted_since(promoted) >= AFTER_JOBS,
                timeout=recovery_bound,
                what=f"{AFTER_JOBS} submits accepted by the new primary",
            )
        finally:
            submits.stop.set()
            for client in clients:
                client.join(timeout=30)

    with submits.lock:
        accepted = dict(submits.accepted)
        errors = [(at, outcome) for at, outcome in submits.errors if at > killed]
    before_kill = [job for job, at in accepted.items() if at <= killed]
    try:
        wait_until(
            lambda: (
                succeeded_count(pair.standby.port, pair.standby.dbname, before_kill)
                == len(before_kill)
            ),
            timeout=recovery_bound,
            what=f"the {len(before_kill)} jobs accepted before the kill",
        )
        whole_before = time.monotonic()
        # Every accepted job, and any a cut submit committed without its 202 (its client may
        # retry it with the same Idempotency-Key): all of them run.
        wait_until(
            lambda: (
                succeeded_count(pair.standby.port, pair.standby.dbname, list(accepted))
                == len(accepted)
                and unfinished(pair.standby) == 0
            ),
            timeout=recovery_bound,
            what=f"all {len(accepted)} accepted jobs and every other job",
        )
    except AssertionError as exc:
        stories = job_stories(pair.standby, list(accepted), [*workers, beat, web.proc])
        raise AssertionError(
            f"{exc}: {job_states(pair.standby, list(accepted))}\n{stories}"
        ) from None
    drained = time.monotonic()
    return FailoverRun(
        accepted=accepted,
        errors=errors,
        report=check_on(harness, pair, set(accepted)),
        promoted=promoted - killed,
        repointed=repointed,
        first_success=first_success - killed,
        whole_before=whole_before - killed,
        drained=drained - killed,
        redelivered=redelivered(pair.standby),
        workers=workers,
    )


def assert_every_accepted_job_ran_once(run: FailoverRun, *, recovery_bound: float) -> None:
    """The checker's verdict: every 202 found and finished, each effect once, no job waited
    for the reconciler, and the jobs accepted before the kill all succeeded in time."""
    assert run.report["ok"], run.report["violations"]
    assert run.report["jobs"] >= len(run.accepted)
    assert run.report["notices"] == run.report["states"].get("succeeded", 0)
    assert run.report["reconciler_requeues"] == 0
    assert run.whole_before < recovery_bound
    assert all(w.alive() for w in run.workers)
