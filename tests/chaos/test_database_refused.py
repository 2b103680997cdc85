"""A worker whose database refuses connections acks nothing it did not handle, stops consuming,
and consumes again once the database answers (jobs.gate): no job waits for the reconciler. A
lease holder cut off from it stops its handler before the lease could expire elsewhere.

Each worker reaches the test database through a TCP fault proxy of its own (its "host's"
path to PostgreSQL): `reset()` aborts the open connections with an RST and `refuse()` closes
the listener, so a new connection is refused by the kernel. No reconciler runs here: every job
that finishes was redelivered because its message went back to the queue.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import jobs
from jobs.models import Job, JobEvent
from tests.harness import Harness, Proc, wait_until
from tests.kinds_network import WATCH_DIR_ENV, WATCH_LEASE, watch_note
from tests.network.proxy import FaultProxy, fault_proxy

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

JOBS = 50
REFUSAL_SECONDS = 0.5
# The bound on recovery: the refusal, the gate's probe interval (1 s), the broker round trips
# of the consumer control, and 50 no-op jobs on two pool processes, with a wide margin.
RECOVERY_BOUND = 15.0


def _through(database_url: str, proxy: FaultProxy) -> str:
    parts = urlsplit(database_url)
    netloc = f"{parts.username or 'postgres'}@{proxy.host}:{proxy.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _start_worker_through(
    harness: Harness,
    proxy: FaultProxy,
    name: str,
    *,
    concurrency: int = 1,
    env: Mapping[str, str] | None = None,
) -> Proc:
    """A worker whose every connection to the test database goes through `proxy`."""
    database_url = _through(harness.database_url, proxy)
    return harness.start_worker(name, concurrency=concurrency, DATABASE_URL=database_url, env=env)


@pytest.fixture
def db_proxy(harness: Harness) -> Iterator[FaultProxy]:
    parts = urlsplit(harness.database_url)
    with fault_proxy((parts.hostname or "127.0.0.1", parts.port or 5432)) as proxy:
        yield proxy


def _cut(proxy: FaultProxy) -> None:
    proxy.reset()  # open connections end with an RST
    proxy.refuse()  # new ones are refused


def _submit(user: Any, n: int) -> list[str]:
    return [str(jobs.submit(kind="noop", input={"n": i}, owner=user).pk) for i in range(n)]


def _all_succeeded(ids: list[str]) -> bool:
    return Job.objects.filter(pk__in=ids, state="succeeded").count() == len(ids)


def _wait_for_success(ids: list[str], log: Callable[[], str]) -> None:
    try:
        wait_until(lambda: _all_succeeded(ids), timeout=RECOVERY_BOUND, what=f"{len(ids)} jobs")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: states {_states(ids)}\n{log()[-3000:]}") from None


def _notable(log: str) -> str:
    return "\n".join(line for line in log.splitlines() if " INFO " not in line)[-4000:]


def _states(ids: list[str]) -> dict[str, int]:
    rows = Job.objects.filter(pk__in=ids).values_list("state", flat=True)
    found: dict[str, int] = {}
    for state in rows:
        found[state] = found.get(state, 0) + 1
    return found


@pytest.mark.timeout(180)
def test_refused_for_half_a_second__every_job_succeeds_within_seconds(
    harness: Harness, db_proxy: FaultProxy, user: Any
) -> None:
    worker = _start_worker_through(harness, db_proxy, "refused-w1", concurrency=2)
    warm = _submit(user, 2)  # the worker has connected through the proxy before the cut
    wait_until(lambda: _all_succeeded(warm), timeout=30, what="the warm-up jobs")

    _cut(db_proxy)
    began = time.monotonic()
    ids = _submit(user, JOBS)
    wait_until(lambda: "message requeued" in worker.log(), timeout=10, what="a refused claim")
    time.sleep(max(0.0, REFUSAL_SECONDS - (time.monotonic() - began)))  # the fault's length
    db_proxy.pass_through()

    _wait_for_success(ids, worker.log)
    recovered = time.monotonic() - began
    assert recovered < RECOVERY_BOUND
    # The gate's own account: it paused its consumers, then resumed them after the heal.
    wait_until(
        lambda: "database answers again" in worker.log(), timeout=5, what="the gate's resume"
    )
    assert "stops consuming" in worker.log(), _notable(worker.log())
    assert worker.alive()


@pytest.mark.timeout(180)
def test_worker_cut_off__stops_consuming_and_a_healthy_worker_takes_every_job(
    harness: Harness, db_proxy: FaultProxy, user: Any
) -> None:
    cut_off = _start_worker_through(harness, db_proxy, "cut-w1", concurrency=2)
    _cut(db_proxy)
    healthy = harness.start_worker("healthy-w1", concurrency=1)
    ids = _submit(user, JOBS)
    _wait_for_success(ids, cut_off.log)
    workers = set(
        JobEvent.objects.filter(job_id__in=ids, to_state="leased").values_list("worker", flat=True)
    )
    assert workers and all(w.startswith("healthy-w1") for w in workers), workers
    log = cut_off.log()
    assert "stops consuming" in log, _notable(log)
    assert "database answers again" not in log
    assert healthy.alive() and cut_off.alive()


@pytest.mark.timeout(120)
def test_lease_holder_cut_off__handler_stops_before_its_lease_could_expire(
    harness: Harness,
    db_proxy: FaultProxy,
    user: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(WATCH_DIR_ENV, str(tmp_path))  # watch_note reads it here too
    worker = _start_worker_through(
        harness,
        db_proxy,
        "doubt-w1",
        env={"JOBS_HANDLER_MODULES": "tests.kinds_network", WATCH_DIR_ENV: str(tmp_path)},
    )
    job = jobs.submit(kind="net.watch", input={"seconds": 30}, owner=user)
    wait_until(watch_note(job.pk, "started").exists, timeout=30, what="the handler to start")
    _cut(db_proxy)

    # Unfixed, the handler works on for its 30 s: no heartbeat answer tells it nothing.
    stopped = watch_note(job.pk, "stopped")
    wait_until(stopped.exists, timeout=WATCH_LEASE * 3, what="the handler to stop")
    note = json.loads(stopped.read_text())
    job.refresh_from_db()
    assert note["in_doubt"] and not note["lost"], note
    assert job.state == "leased" and job.lease_until is not None
    # Before the database would let anyone else claim it (same machine, same wall clock).
    assert note["at"] < job.lease_until.timestamp(), (note, job.lease_until)
    wait_until(lambda: "outcome discarded" in worker.log(), timeout=10, what="the discard")
    job.refresh_from_db()
    assert job.state == "leased" and job.generation == 1  # nothing of the attempt written
    assert not JobEvent.objects.filter(job=job, to_state="succeeded").exists()
    assert "heartbeat failed: no extension answered" in worker.log()
