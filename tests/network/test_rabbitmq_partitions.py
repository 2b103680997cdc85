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

import json
import time
from typing import Any

import pytest

import jobs
from jobs.counters import DUPLICATE_DELIVERIES, DUPLICATE_EFFECTS, counter_value
from jobs.models import Job, JobEvent
from tests.harness import Proc, wait_until
from tests.kinds_network import WATCH_LEASE, release, watch_note
from tests.network.rabbitmq import (
    MARGIN,
    RECONNECT_BOUND,
    SERVER_NOTICE_BOUND,
    WORKER_NOTICE_BOUND,
    Site,
    claimed_by,
    job_row,
    since,
    succeeded_events,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

DURING_CUT_BOUND = 5.0  # a no-op job on an idle healthy worker, published over loopback
RELEASE_BOUND = 5.0  # a released net.hold run's next step and its completion write


def _start_long_job(site: Site, user: Any) -> tuple[Proc, Proc, Job]:
    """The cut worker holds the job's message unacked, then a healthy worker starts beside it
    (ready when this returns). The job (`net.hold`) runs until the test releases it or its
    lease is in doubt, so it is still running at the cut however long the healthy worker
    takes to boot."""
    cut_worker = site.start_cut_worker()
    job = jobs.submit(kind="net.hold", input={}, owner=user)
    started = watch_note(job.pk, "started")
    wait_until(started.exists, timeout=30, what="the cut worker to start the long job")
    assert claimed_by(job.pk) == ["rmq-cut"]
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
    cut_worker, healthy, long_job = _start_long_job(site, user)
    duplicates = counter_value(DUPLICATE_DELIVERIES)
    effects = counter_value(DUPLICATE_EFFECTS)

    mark = len(cut_worker.log())
    site.host.blackhole("amqp")
    cut_at = time.monotonic()
    during = jobs.submit(kind="noop", input={}, owner=user)
    wait_until(
        lambda: job_row(during.pk).state == "succeeded",
        timeout=DURING_CUT_BOUND + 10,
        what="the job submitted during the cut",
    )
    during_ran = time.monotonic() - cut_at
    wait_until(
        lambda: since(cut_worker, mark, "Connection to broker lost"),
        timeout=WORKER_NOTICE_BOUND + 10,
        what="the cut worker to notice its broker is gone",
    )
    noticed = time.monotonic() - cut_at
    wait_until(
        lambda: counter_value(DUPLICATE_DELIVERIES) > duplicates,
        timeout=SERVER_NOTICE_BOUND + 10,
        what="RabbitMQ to redeliver the cut worker's unacked message",
    )
    redelivered = time.monotonic() - cut_at
    assert job_row(long_job.pk).state == "leased"  # the redelivery met its live lease
    release(long_job.pk)
    wait_until(
        lambda: job_row(long_job.pk).state == "succeeded",
        timeout=10,
        what="the cut worker to finish the long job once released",
    )

    mark = len(cut_worker.log())
    site.host.heal("amqp")
    healed_at = time.monotonic()
    wait_until(
        lambda: since(cut_worker, mark, "Connected to amqp://"),
        timeout=RECONNECT_BOUND + 10,
        what="the cut worker to reconnect after the heal",
    )
    reconnected = time.monotonic() - healed_at
    healthy.stop()  # the next job can only go to the worker that was cut
    after = jobs.submit(kind="noop", input={}, owner=user)
    wait_until(
        lambda: job_row(after.pk).state == "succeeded", timeout=20, what="a job after the heal"
    )
    after_ran = time.monotonic() - healed_at

    print(
        f"rabbitmq broker cut: worker noticed {noticed:.1f}s, redelivered {redelivered:.1f}s, "
        f"job during cut ran {during_ran:.1f}s; reconnected {reconnected:.1f}s after heal, "
        f"next job ran {after_ran:.1f}s after heal"
    )
    assert noticed <= WORKER_NOTICE_BOUND + MARGIN
    assert redelivered <= SERVER_NOTICE_BOUND + MARGIN
    assert during_ran <= DURING_CUT_BOUND
    assert claimed_by(during.pk) == ["rmq-healthy"]
    # The redelivery met a live lease: acked and left to its owner, which finished it once.
    assert counter_value(DUPLICATE_DELIVERIES) == duplicates + 1
    assert claimed_by(long_job.pk) == ["rmq-cut"]
    assert succeeded_events(long_job.pk) == ["rmq-cut"]
    assert job_row(long_job.pk).generation == 1
    assert counter_value(DUPLICATE_EFFECTS) == effects
    assert reconnected <= RECONNECT_BOUND + MARGIN
    assert claimed_by(after.pk) == ["rmq-cut"]
    assert cut_worker.alive()


@pytest.mark.timeout(150)
def test_host_cut_off__a_healthy_worker_takes_the_unacked_job_over_and_the_cut_one_writes_nothing(
    site: Site, user: Any
) -> None:
    """The whole host is cut (broker and PostgreSQL): the lease holder stops its handler in
    doubt, RabbitMQ requeues its unacked message within 3 x heartbeat, the healthy worker finds
    the lease expired, takes it over (generation 2) and finishes the job; after the heal the
    cut worker's run has written nothing."""
    # The job runs until released: still running at the cut, however slow the healthy
    # worker's boot was; the healthy worker's run lasts until the release after the takeover.
    cut_worker, _healthy, job = _start_long_job(site, user)
    assert job_row(job.pk).state == "leased"
    effects = counter_value(DUPLICATE_EFFECTS)
    site.host.blackhole()
    cut_at = time.monotonic()
    wait_until(
        lambda: job_row(job.pk).generation == 2,
        timeout=SERVER_NOTICE_BOUND + 10,
        what="the healthy worker to take the job over",
    )
    taken_over = time.monotonic() - cut_at
    # Not released yet, so a "stopped" note is the cut worker's run: it stopped in doubt.
    stopped = watch_note(job.pk, "stopped")
    wait_until(stopped.exists, timeout=10, what="the cut worker's run to stop in doubt")
    cut_run = json.loads(stopped.read_text())
    assert cut_run["in_doubt"] and not cut_run["released"], cut_run
    assert job_row(job.pk).state == "leased"  # the healthy worker's run holds it
    release(job.pk)
    released_at = time.monotonic()
    wait_until(
        lambda: job_row(job.pk).state == "succeeded",
        timeout=RELEASE_BOUND + 10,
        what="the healthy worker to finish the job once released",
    )
    finished = time.monotonic() - released_at

    mark = len(cut_worker.log())
    site.host.heal()
    wait_until(
        lambda: since(cut_worker, mark, "Connected to amqp://"),
        timeout=RECONNECT_BOUND + 10,
        what="the cut worker to reconnect after the heal",
    )
    print(
        f"rabbitmq host cut: taken over {taken_over:.1f}s after cut, "
        f"finished {finished:.1f}s after release"
    )
    assert taken_over <= SERVER_NOTICE_BOUND + MARGIN
    assert finished <= RELEASE_BOUND
    assert claimed_by(job.pk) == ["rmq-cut", "rmq-healthy"]
    assert succeeded_events(job.pk) == ["rmq-healthy"]
    # Its claim is the cut worker's only write: the run's outcome was discarded.
    written = JobEvent.objects.filter(job_id=job.pk, worker__startswith="rmq-cut:")
    assert list(written.values_list("to_state", flat=True)) == ["leased"]
    assert WATCH_LEASE < SERVER_NOTICE_BOUND  # why the redelivery finds the lease expired
    assert counter_value(DUPLICATE_EFFECTS) == effects
    assert cut_worker.alive()
