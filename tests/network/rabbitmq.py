"""RabbitMQ for the network tests: a vhost per test, a worker in a host behind fault proxies
and one beside us, the bounds both sides keep (tests/network/conftest.py has the fixtures
`vhost` and `site`).

The host reaches RabbitMQ and the test database through fault proxies listening on service
addresses (RabbitMQ and PostgreSQL listen on 127.0.0.1 only, and RabbitMQ lets `guest` in
from loopback only): a cut drops the host's side, and each proxy keeps its upstream
connection open, as a NAT or a load balancer in front of RabbitMQ would. So RabbitMQ learns
of a dead consumer from missed AMQP heartbeats, not from a closed socket.
"""

from __future__ import annotations

import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.models import Job, JobEvent
from tests.harness import Harness, Proc
from tests.kinds_network import WATCH_DIR_ENV
from tests.network.hosts import HostHarness
from tests.network.netns import Host

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
VHOST_PREFIX = "dj-net-"


def rabbitmqctl(*args: str) -> str:
    result = subprocess.run(
        ["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"rabbitmqctl {' '.join(args)}: {result.stderr}"
    return result.stdout


def sweep_vhosts() -> None:
    """Delete the vhosts of runs whose process is gone (a crashed run's leftovers)."""
    for name in rabbitmqctl("list_vhosts").split():
        match = re.fullmatch(rf"{VHOST_PREFIX}(\d+)-\w+", name)
        if match and not Path(f"/proc/{match[1]}").exists():
            rabbitmqctl("delete_vhost", name)


def rabbitmq_up() -> bool:
    try:
        socket.create_connection(RABBITMQ, timeout=1).close()
    except OSError:
        return False
    return True


def consumers(vhost: str, queue: str = "jobs") -> list[str]:
    """The channel of each consumer RabbitMQ has registered on `queue` (one per worker)."""
    out = rabbitmqctl("list_consumers", "-p", vhost, "queue_name", "channel_pid")
    rows = [line.split("\t") for line in out.splitlines() if line.strip()]
    return [row[1] for row in rows if len(row) > 1 and row[0] == queue]


def queue_counts(vhost: str, queue: str = "jobs") -> tuple[int, int]:
    """(ready, unacknowledged) messages of `queue`, as RabbitMQ counts them."""
    out = rabbitmqctl(
        "list_queues", "-p", vhost, "name", "messages_ready", "messages_unacknowledged"
    )
    for line in out.splitlines():
        name, ready, unacked = line.split("\t")
        if name == queue:
            return int(ready), int(unacked)
    return 0, 0


@dataclass
class Site:
    """One test's two workers' worlds: `cut` starts workers in the host, `root` beside us."""

    host: Host
    cut: HostHarness
    root: Harness
    watch_dir: Path
    vhost: str

    def worker_env(self) -> dict[str, str]:
        return {
            "CELERY_BROKER_HEARTBEAT": str(HEARTBEAT),
            "JOBS_HANDLER_MODULES": "tests.kinds_network",
            WATCH_DIR_ENV: str(self.watch_dir),
        }

    def start_cut_worker(self, name: str = "rmq-cut") -> Proc:
        return self.cut.start_worker(name, env=self.worker_env())

    def start_healthy_worker(self) -> Proc:
        return self.root.start_worker("rmq-healthy", env=self.worker_env())


def since(worker: Proc, mark: int, text: str) -> bool:
    """Whether `text` is in the worker's log after offset `mark`."""
    return text in worker.log()[mark:]


def job_row(pk: Any) -> Job:
    return Job.objects.get(pk=pk)


def claimed_by(pk: Any) -> list[str]:
    """The worker name of each claim of the job, in order."""
    events = JobEvent.objects.filter(job_id=pk, to_state="leased").order_by("at")
    return [worker.split(":")[0] for worker in events.values_list("worker", flat=True)]


def succeeded_events(pk: Any) -> list[str]:
    events = JobEvent.objects.filter(job_id=pk, to_state="succeeded")
    return [worker.split(":")[0] for worker in events.values_list("worker", flat=True)]
