"""A message Redis handed to a consumer that is then SIGKILLed vanishes; the redelivery check
(run by a real beat and maintenance worker) publishes the job again within seconds."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import jobs
from jobs.counters import DUPLICATE_EFFECTS, REDELIVERED, counter_value
from jobs.models import Job, JobEvent
from outbox.models import OutboxEntry
from tests.harness import Harness, Proc, broker_job_ids, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

RECOVERY_BOUND_SECONDS = 30.0
FAST = {"JOBS_REDELIVER_INTERVAL": "1", "JOBS_WORKER_HEARTBEAT_INTERVAL": "1"}


def _tcp_ports(pid: int) -> set[int]:
    """Local ports of the process's TCP sockets (/proc: its socket inodes, then net/tcp)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _blocked_in_brpop(client: redis.Redis, pid: int) -> bool:
    """Redis holds a pending BRPOP of this process (its client is blocked: flag b)."""
    ports = _tcp_ports(pid)
    return any(
        entry.get("cmd") == "brpop"
        and "b" in entry.get("flags", "")
        and int(str(entry["addr"]).rsplit(":", 1)[1]) in ports
        for entry in client.client_list()
    )


def _stopped_with_brpop_pending(client: redis.Redis, worker: Proc) -> None:
    """SIGSTOP the worker's main process at a moment its BRPOP is registered in Redis. kombu
    renews the BRPOP every second, so a stop between two is retried: we observe, never hope."""
    for _ in range(50):
        wait_until(lambda: _blocked_in_brpop(client, worker.pid), timeout=10, what="a BRPOP")
        worker.signal(signal.SIGSTOP)
        if _blocked_in_brpop(client, worker.pid):
            return
        worker.signal(signal.SIGCONT)
    raise AssertionError("never caught the worker with its BRPOP pending")


def _kill_tree(worker: Proc) -> None:
    for pid in [*worker.children(), worker.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    worker.popen.wait(timeout=10)


def _start_beat(harness: Harness) -> None:
    harness.start_worker("maint", queues="jobs.maintenance", env=FAST)
    schedule = harness.workdir / "beat-schedule"
    argv = [sys.executable, "-m", "celery", "-A", "jobsite", "beat", f"--schedule={schedule}"]
    harness.spawn("beat", argv, harness.base_env(**FAST))


def test_message_handed_to_a_consumer_then_sigkilled__republished_and_run_once_in_seconds(
    harness: Harness, broker: redis.Redis, user: Any
) -> None:
    """The issue's scenario, made deterministic: the consumer is frozen (SIGSTOP) while Redis
    holds its BRPOP, so the publish is handed to it and leaves the list; it never reaches the
    unacked hash (kombu writes that after reading the reply), and SIGKILL drops the reply.
    If the BRPOP expired between our look and the publish (the message is still in the
    list), the test removes it itself: the same loss, simulated, and says so."""
    harness.start_provider()
    _start_beat(harness)
    doomed = harness.start_worker("w-doomed", env=FAST)
    _stopped_with_brpop_pending(broker, doomed)

    started = time.monotonic()
    job = jobs.submit(kind="drill.notify", input={"note": "vanishing"}, owner=user)
    wait_until(
        lambda: OutboxEntry.objects.filter(job_id=job.pk, published_at__isnull=False).exists(),
        timeout=10,
        what="the fast path to publish and mark the job",
    )
    if str(job.pk) in broker_job_ids(harness.broker_url):
        broker.delete("jobs")  # the BRPOP had expired: lose the message by hand
        print("BRPOP expired before the publish: message removed from the list instead")
    assert broker_job_ids(harness.broker_url) == []
    assert not any(str(job.pk).encode() in v for v in broker.hvals("unacked"))
    _kill_tree(doomed)

    harness.start_worker("w-survivor", env=FAST)
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded",
        timeout=RECOVERY_BOUND_SECONDS + 30,
        what="the job to run after its message vanished",
    )
    recovered = time.monotonic() - started

    assert recovered < RECOVERY_BOUND_SECONDS, f"recovered in {recovered:.1f}s"
    print(f"lost message recovered in {recovered:.1f}s")
    done = Job.objects.get(pk=job.pk)
    assert (done.generation, done.attempt) == (1, 1)  # one claim, one handler run
    assert JobEvent.objects.filter(job=job, actor="redeliverer").count() >= 1
    assert counter_value(REDELIVERED) >= 1
    stats = harness.provider_stats()
    assert stats["duplicate_sends"] == 0 and len(stats["requests_by_key"]) == 1
    assert counter_value(DUPLICATE_EFFECTS) == 0
