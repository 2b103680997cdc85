"""RabbitMQ under a true partition: a worker in a host (network namespace) reaching RabbitMQ
only through a service address, cut in the kernel (no RST, no ICMP) while it holds an unacked
message; a healthy worker in the root namespace beside it. Bounds asserted, times printed.

Each test has a vhost of its own (rabbitmqctl add_vhost, deleted at the end), so nothing else's
queues are touched. The host reaches RabbitMQ and the test database through fault proxies
listening on service addresses (RabbitMQ and PostgreSQL listen on 127.0.0.1 only, and RabbitMQ
lets `guest` in from loopback only): a cut drops the host's side, and each proxy keeps its
upstream connection open, as a NAT or a load balancer in front of RabbitMQ would. So RabbitMQ
learns of the dead consumer from missed AMQP heartbeats, not from a closed socket.
docs/fault-matrix.md "Network" has the rows and the comparison with Redis.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import jobs
from demo.guided.processes import point_celery_at
from jobs.models import Job, JobEvent
from jobs.signals import DUPLICATE_DELIVERIES, DUPLICATE_EFFECTS, signal_value
from tests.harness import Harness, PrivateRedis, Proc, wait_until
from tests.kinds_network import WATCH_DIR_ENV, WATCH_LEASE, watch_note
from tests.network.netns import Host, Network
from tests.network.proxy import fault_proxy

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

RABBITMQ = ("127.0.0.1", 5672)
MARGIN = 2.0  # process scheduling and timer granularity, not a second bound
HEARTBEAT = 4  # CELERY_BROKER_HEARTBEAT of the test's workers (the project's default is 10)
# Celery checks the connection every heartbeat / broker_heartbeat_checkrate (3) s; py-amqp
# gives up when nothing came for 2 x heartbeat (amqp.Connection.heartbeat_tick). Its sockets
# also carry TCP_USER_TIMEOUT 1 s (amqp.transport.DEFAULT_SOCKET_SETTINGS), so the first
# heartbeat sent into the cut usually ends the connection sooner.
WORKER_NOTICE_BOUND = 2 * HEARTBEAT + HEARTBEAT / 3
# RabbitMQ checks for traffic every heartbeat and closes a connection after two silent checks
# (rabbit_heartbeat), then requeues its unacked messages at once: at most 3 x heartbeat.
SERVER_NOTICE_BOUND = 3 * HEARTBEAT
# Celery reconnects at once, then 2, 4, 6, 8 s ... apart (kombu ensure_connection), each
# attempt bounded by broker_connection_timeout (4 s, SYNs at 0, 1 and 3 s). A heal during a
# gap is seen at the next attempt; one during an attempt by its next SYN, or after its last
# one by the attempt after the next gap. The tests' cuts end before the gaps pass 8 s.
RECONNECT_BOUND = 1.0 + 8.0
DURING_CUT_BOUND = 5.0  # a no-op job on an idle healthy worker, published over loopback
VHOST_PREFIX = "dj-net-"


def rabbitmqctl(*args: str) -> str:
    result = subprocess.run(
        ["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"rabbitmqctl {' '.join(args)}: {result.stderr}"
    return result.stdout


def _sweep_vhosts() -> None:
    """Delete the vhosts of runs whose process is gone (a crashed run's leftovers)."""
    for name in rabbitmqctl("list_vhosts").split():
        match = re.fullmatch(rf"{VHOST_PREFIX}(\d+)-\w+", name)
        if match and not Path(f"/proc/{match[1]}").exists():
            rabbitmqctl("delete_vhost", name)


def _rabbitmq_up() -> bool:
    try:
        socket.create_connection(RABBITMQ, timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def vhost() -> Iterator[str]:
    """A RabbitMQ vhost of this test only (guest may use it), deleted at teardown."""
    assert _rabbitmq_up(), "RabbitMQ must run on 127.0.0.1:5672 (scripts/ensure-services.sh)"
    _sweep_vhosts()
    name = f"{VHOST_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", name)
    try:
        rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        yield name
    finally:
        rabbitmqctl("delete_vhost", name)


class HostHarness(Harness):
    """A harness whose processes run inside `host`."""

    host: Host

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        return super().spawn(name, self.host.wrap(argv), env)


@dataclass
class Site:
    """One test's two workers' worlds: `cut` starts workers in the host, `root` beside us."""

    host: Host
    cut: HostHarness
    root: Harness
    watch_dir: Path

    def worker_env(self) -> dict[str, str]:
        return {
            "CELERY_BROKER_HEARTBEAT": str(HEARTBEAT),
            "JOBS_HANDLER_MODULES": "tests.kinds_network",
            WATCH_DIR_ENV: str(self.watch_dir),
        }

    def start_cut_worker(self) -> Proc:
        return self.cut.start_worker("rmq-cut", **self.worker_env())

    def start_healthy_worker(self) -> Proc:
        return self.root.start_worker("rmq-healthy", **self.worker_env())


@pytest.fixture
def site(
    network: Network,
    vhost: str,
    session_redis: PrivateRedis,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Site]:
    amqp_address, pg_address = network.service("amqp"), network.service("pg")
    db = connection.settings_dict
    database = (db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))
    workdir = Path(tempfile.mkdtemp(prefix="jobs-rmq-net-"))
    (workdir / "media").mkdir()
    settings.MEDIA_ROOT = workdir / "media"
    monkeypatch.setenv(WATCH_DIR_ENV, str(tmp_path))  # watch_note reads it here too
    local_url = f"amqp://guest:guest@127.0.0.1:{RABBITMQ[1]}/{vhost}"
    point_celery_at(local_url)  # this process submits over loopback, into the test's vhost
    with (
        fault_proxy(RABBITMQ, host=amqp_address) as amqp_proxy,
        fault_proxy(database, host=pg_address) as pg_proxy,
    ):
        common = {"workdir": workdir, "media_root": workdir / "media"}
        cut = HostHarness(
            broker_url=f"amqp://guest:guest@{amqp_address}:{amqp_proxy.port}/{vhost}",
            database_url=f"postgres://postgres@{pg_address}:{pg_proxy.port}/{db['NAME']}",
            **common,
        )
        cut.host = network.host()
        root = Harness(
            broker_url=local_url,
            database_url=f"postgres://postgres@{database[0]}:{database[1]}/{db['NAME']}",
            **common,
        )
        try:
            yield Site(cut.host, cut, root, tmp_path)
        finally:
            root.stop_all()
            cut.stop_all()
            point_celery_at(session_redis.url)
            if not os.environ.get("JOBS_TEST_KEEP_LOGS"):
                shutil.rmtree(workdir, ignore_errors=True)


def _since(worker: Proc, mark: int, text: str) -> bool:
    return text in worker.log()[mark:]


def _job(pk: Any) -> Job:
    return Job.objects.get(pk=pk)


def _claimed_by(pk: Any) -> list[str]:
    events = JobEvent.objects.filter(job_id=pk, to_state="leased").order_by("at")
    return [worker.split(":")[0] for worker in events.values_list("worker", flat=True)]


def _succeeded_events(pk: Any) -> list[str]:
    events = JobEvent.objects.filter(job_id=pk, to_state="succeeded")
    return [worker.split(":")[0] for worker in events.values_list("worker", flat=True)]


def _start_long_job(site: Site, user: Any, seconds: float) -> tuple[Proc, Proc, Job]:
    """The cut worker holds the job's message unacked, then a healthy worker starts beside it."""
    cut_worker = site.start_cut_worker()
    job = jobs.submit(kind="net.watch", input={"seconds": seconds}, owner=user)
    started = watch_note(job.pk, "started")
    wait_until(started.exists, timeout=30, what="the cut worker to start the long job")
    assert _claimed_by(job.pk) == ["rmq-cut"]
    healthy = site.start_healthy_worker()
    return cut_worker, healthy, job


@pytest.mark.timeout(150)
def test_broker_cut__redelivery_left_to_the_live_lease_and_the_worker_consumes_after_heal(
    site: Site, user: Any
) -> None:
    """Only the broker path is cut (PostgreSQL still reachable): the worker notices within
    its heartbeat bound; RabbitMQ redelivers its unacked message within 3 x heartbeat, and the
    healthy worker acks it as a duplicate (the cut worker's lease is alive and it finishes the
    job: once). A job submitted during the cut runs on the healthy worker at once; after the
    heal the cut worker reconnects and takes jobs again."""
    cut_worker, healthy, long_job = _start_long_job(site, user, seconds=22)
    duplicates = signal_value(DUPLICATE_DELIVERIES)
    effects = signal_value(DUPLICATE_EFFECTS)

    mark = len(cut_worker.log())
    site.host.blackhole("amqp")
    cut_at = time.monotonic()
    during = jobs.submit(kind="noop", input={}, owner=user)
    wait_until(
        lambda: _job(during.pk).state == "succeeded",
        timeout=DURING_CUT_BOUND + 10,
        what="the job submitted during the cut",
    )
    during_ran = time.monotonic() - cut_at
    wait_until(
        lambda: _since(cut_worker, mark, "Connection to broker lost"),
        timeout=WORKER_NOTICE_BOUND + 10,
        what="the cut worker to notice its broker is gone",
    )
    noticed = time.monotonic() - cut_at
    wait_until(
        lambda: signal_value(DUPLICATE_DELIVERIES) > duplicates,
        timeout=SERVER_NOTICE_BOUND + 10,
        what="RabbitMQ to redeliver the cut worker's unacked message",
    )
    redelivered = time.monotonic() - cut_at
    wait_until(
        lambda: _job(long_job.pk).state == "succeeded",
        timeout=40,
        what="the cut worker to finish the long job",
    )

    mark = len(cut_worker.log())
    site.host.heal("amqp")
    healed_at = time.monotonic()
    wait_until(
        lambda: _since(cut_worker, mark, "Connected to amqp://"),
        timeout=RECONNECT_BOUND + 10,
        what="the cut worker to reconnect after the heal",
    )
    reconnected = time.monotonic() - healed_at
    healthy.stop()  # the next job can only go to the worker that was cut
    after = jobs.submit(kind="noop", input={}, owner=user)
    wait_until(lambda: _job(after.pk).state == "succeeded", timeout=20, what="a job after the heal")
    after_ran = time.monotonic() - healed_at

    print(
        f"rabbitmq broker cut: worker noticed {noticed:.1f}s, redelivered {redelivered:.1f}s, "
        f"job during cut ran {during_ran:.1f}s; reconnected {reconnected:.1f}s after heal, "
        f"next job ran {after_ran:.1f}s after heal"
    )
    assert noticed <= WORKER_NOTICE_BOUND + MARGIN
    assert redelivered <= SERVER_NOTICE_BOUND + MARGIN
    assert during_ran <= DURING_CUT_BOUND
    assert _claimed_by(during.pk) == ["rmq-healthy"]
    # The redelivery met a live lease: acked and left to its owner, which finished it once.
    assert signal_value(DUPLICATE_DELIVERIES) == duplicates + 1
    assert _claimed_by(long_job.pk) == ["rmq-cut"]
    assert _succeeded_events(long_job.pk) == ["rmq-cut"]
    assert _job(long_job.pk).generation == 1
    assert signal_value(DUPLICATE_EFFECTS) == effects
    assert reconnected <= RECONNECT_BOUND + MARGIN
    assert _claimed_by(after.pk) == ["rmq-cut"]
    assert cut_worker.alive()


@pytest.mark.timeout(150)
def test_host_cut_off__a_healthy_worker_takes_the_unacked_job_over_and_the_cut_one_writes_nothing(
    site: Site, user: Any
) -> None:
    """The whole host is cut (broker and PostgreSQL): the lease holder stops its handler in
    doubt, RabbitMQ requeues its unacked message within 3 x heartbeat, the healthy worker finds
    the lease expired, takes it over (generation 2) and finishes the job; after the heal the
    cut worker's run has written nothing."""
    # Long enough to be running when the cut comes (after the healthy worker has booted);
    # the healthy worker's run takes as long.
    seconds = 12.0
    cut_worker, _healthy, job = _start_long_job(site, user, seconds=seconds)
    effects = signal_value(DUPLICATE_EFFECTS)
    site.host.blackhole()
    cut_at = time.monotonic()
    wait_until(
        lambda: _job(job.pk).generation == 2,
        timeout=SERVER_NOTICE_BOUND + 10,
        what="the healthy worker to take the job over",
    )
    taken_over = time.monotonic() - cut_at
    wait_until(
        lambda: _job(job.pk).state == "succeeded",
        timeout=seconds + 10,
        what="the healthy worker to finish the job",
    )
    finished = time.monotonic() - cut_at

    mark = len(cut_worker.log())
    site.host.heal()
    wait_until(
        lambda: _since(cut_worker, mark, "Connected to amqp://"),
        timeout=RECONNECT_BOUND + 10,
        what="the cut worker to reconnect after the heal",
    )
    print(f"rabbitmq host cut: taken over {taken_over:.1f}s, finished {finished:.1f}s after cut")
    assert taken_over <= SERVER_NOTICE_BOUND + MARGIN
    assert finished <= SERVER_NOTICE_BOUND + seconds + MARGIN
    assert _claimed_by(job.pk) == ["rmq-cut", "rmq-healthy"]
    assert _succeeded_events(job.pk) == ["rmq-healthy"]
    # Its claim is the cut worker's only write: the run's outcome was discarded.
    written = JobEvent.objects.filter(job_id=job.pk, worker__startswith="rmq-cut:")
    assert list(written.values_list("to_state", flat=True)) == ["leased"]
    assert WATCH_LEASE < SERVER_NOTICE_BOUND  # why the redelivery finds the lease expired
    assert signal_value(DUPLICATE_EFFECTS) == effects
    assert cut_worker.alive()
