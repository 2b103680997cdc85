"""RabbitMQ under a true partition, the worker idle: its whole host (broker and PostgreSQL
paths) is cut in the kernel (no RST, no ICMP) for longer than the AMQP heartbeat while no
message is on its way. RabbitMQ still counts the dead consumer, with a free prefetch slot,
until the heartbeats it misses close the connection: a message published before that goes
into the dead connection, unacked, and must come back to the queue. Every job submitted
during the cut and after the heal runs once, on the same worker, after the heal.

The site (tests/network/conftest.py, tests/network/rabbitmq.py) puts the worker in a host
behind fault proxies that keep their upstream connections open, so RabbitMQ learns of the
cut only from missed heartbeats (4 s in the test; 10 s by default). docs/fault-matrix.md
"Network" has the row.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import jobs
from jobs.counters import DUPLICATE_DELIVERIES, DUPLICATE_EFFECTS, counter_value
from jobs.models import Job
from tests.harness import wait_until
from tests.network.rabbitmq import (
    HEARTBEAT,
    MARGIN,
    RECONNECT_BOUND,
    SERVER_NOTICE_BOUND,
    WORKER_NOTICE_BOUND,
    Site,
    claimed_by,
    consumers,
    job_row,
    queue_counts,
    since,
    succeeded_events,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

EARLY_JOBS = 3  # submitted at once after the cut: RabbitMQ still counts the consumer
LATE_JOBS = 3  # submitted after RabbitMQ dropped it: they wait in the queue
# After the heal: the reconnect, then the waiting no-op jobs one by one (a fresh PostgreSQL
# connection each, CONN_MAX_AGE 0) on one process: well under a second each.
DRAIN_BOUND = RECONNECT_BOUND + 5.0


def _succeeded(job: Job) -> bool:
    return job_row(job.pk).state == "succeeded"


@pytest.mark.timeout(150)
def test_idle_worker_host_cut_past_the_heartbeat__jobs_of_the_cut_run_once_after_heal(
    site: Site, user: Any
) -> None:
    """The idle worker's host cut: the worker notices within its heartbeat bound, RabbitMQ
    drops its consumer within 3 x heartbeat and puts back the message it had handed to the
    dead connection; after the heal the worker consumes again within the reconnect bound and
    runs every job of the cut once, then new ones."""
    worker = site.start_cut_worker("rmq-idle")
    first = jobs.submit(kind="noop", input={}, owner=user)
    wait_until(lambda: _succeeded(first), timeout=30, what="a job before the cut")
    registered = wait_until(lambda: consumers(site.vhost), timeout=10, what="the consumer")
    assert len(registered) == 1, registered
    duplicates = counter_value(DUPLICATE_DELIVERIES)
    effects = counter_value(DUPLICATE_EFFECTS)

    mark = len(worker.log())
    site.host.blackhole()
    cut_at = time.monotonic()
    early = [jobs.submit(kind="noop", input={"n": n}, owner=user) for n in range(EARLY_JOBS)]
    # RabbitMQ still counts the consumer: its free prefetch slot takes one message.
    handed = wait_until(
        lambda: queue_counts(site.vhost) == (EARLY_JOBS - 1, 1),
        timeout=5,
        what="RabbitMQ to hand one message to the dead consumer",
    )
    handed_at = time.monotonic() - cut_at
    wait_until(
        lambda: since(worker, mark, "Connection to broker lost"),
        timeout=WORKER_NOTICE_BOUND + 10,
        what="the worker to notice its broker is gone",
    )
    noticed = time.monotonic() - cut_at
    wait_until(
        lambda: not consumers(site.vhost),
        timeout=SERVER_NOTICE_BOUND + 10,
        what="RabbitMQ to drop the dead consumer",
    )
    dropped = time.monotonic() - cut_at
    # Its unacked message is back: nothing stays in the dead connection.
    assert queue_counts(site.vhost) == (EARLY_JOBS, 0)
    late = [jobs.submit(kind="noop", input={"n": n}, owner=user) for n in range(LATE_JOBS)]
    wait_until(
        lambda: queue_counts(site.vhost) == (EARLY_JOBS + LATE_JOBS, 0),
        timeout=5,
        what="the jobs submitted after the drop to wait in the queue",
    )
    assert all(job_row(j.pk).state == "queued" for j in [*early, *late])

    mark = len(worker.log())
    site.host.heal()
    healed_at = time.monotonic()
    cut_for = healed_at - cut_at
    wait_until(
        lambda: since(worker, mark, "Connected to amqp://"),
        timeout=RECONNECT_BOUND + 10,
        what="the worker to reconnect after the heal",
    )
    reconnected = time.monotonic() - healed_at
    back = wait_until(lambda: consumers(site.vhost), timeout=10, what="the consumer to be back")
    consumer_back = time.monotonic() - healed_at
    wait_until(
        lambda: any(_succeeded(j) for j in [*early, *late]),
        timeout=DRAIN_BOUND + 10,
        what="the worker to consume again",
    )
    consumed = time.monotonic() - healed_at
    wait_until(
        lambda: all(_succeeded(j) for j in [*early, *late]),
        timeout=DRAIN_BOUND + 10,
        what="every job of the cut to run",
    )
    drained = time.monotonic() - healed_at
    after = jobs.submit(kind="noop", input={}, owner=user)
    wait_until(lambda: _succeeded(after), timeout=10, what="a job after the heal")

    print(
        f"\nrabbitmq idle host cut for {cut_for:.1f}s (heartbeat {HEARTBEAT}s): one message "
        f"handed to the dead consumer {handed_at:.1f}s after the cut, worker noticed "
        f"{noticed:.1f}s, RabbitMQ dropped the consumer {dropped:.1f}s (unacked requeued); "
        f"after the heal: reconnected {reconnected:.1f}s, consumer registered again "
        f"{consumer_back:.1f}s, first job ran {consumed:.1f}s, all "
        f"{EARLY_JOBS + LATE_JOBS} jobs of the cut {drained:.1f}s"
    )
    assert handed
    assert cut_for > 2 * HEARTBEAT  # past the heartbeat: both sides gave the connection up
    assert noticed <= WORKER_NOTICE_BOUND + MARGIN
    assert dropped <= SERVER_NOTICE_BOUND + MARGIN
    assert reconnected <= RECONNECT_BOUND + MARGIN
    assert len(back) == 1 and back != registered  # a new channel: the consumer came back
    assert consumed <= DRAIN_BOUND + MARGIN
    assert drained <= DRAIN_BOUND + MARGIN
    for job in [first, *early, *late, after]:
        row = job_row(job.pk)
        assert (row.state, row.generation, row.attempt) == ("succeeded", 1, 1), job.pk
        assert claimed_by(job.pk) == ["rmq-idle"]
        assert succeeded_events(job.pk) == ["rmq-idle"]
    # The requeued message was the worker's first delivery of its job, not a duplicate.
    assert counter_value(DUPLICATE_DELIVERIES) == duplicates
    assert counter_value(DUPLICATE_EFFECTS) == effects
    assert worker.alive()
