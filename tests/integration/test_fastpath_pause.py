"""outbox.breaker against a broker that fails every connection: after the first failure a
submit makes no broker call (its row goes to the relay), the probe after the pause runs in
the publisher thread, and the first publish that goes through resumes the fast path."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest

import jobs
from outbox import breaker as breaker_module
from outbox import fastpath
from outbox.breaker import breaker
from outbox.models import OutboxEntry
from outbox.relay import outbox_relay_batch
from tests.conftest import celery_at, point_celery
from tests.harness import ClosingBroker, PrivateRedis, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dead_broker(session_redis: PrivateRedis) -> Iterator[ClosingBroker]:
    dead = ClosingBroker()
    try:
        with celery_at(f"redis://127.0.0.1:{dead.port}/0", back=session_redis.url):
            yield dead
    finally:
        dead.close()


def _row(job: Any) -> OutboxEntry:
    return OutboxEntry.objects.get(job_id=job.pk)


def test_broker_down__one_submit_meets_it__the_next_ones_make_no_broker_call(
    dead_broker: ClosingBroker, session_redis: PrivateRedis, user: Any
) -> None:
    started = time.monotonic()
    first = jobs.submit(kind="noop", input={"n": 0}, owner=user)
    first_seconds = time.monotonic() - started
    assert breaker.paused() and breaker.probing()
    assert _row(first).published_at is None  # backed off in the outbox
    connects = dead_broker.accepted
    assert connects >= 1

    later, slowest = [], 0.0
    for n in range(1, 21):
        started = time.monotonic()
        later.append(jobs.submit(kind="noop", input={"n": n}, owner=user))
        slowest = max(slowest, time.monotonic() - started)
    assert breaker.paused()
    assert dead_broker.accepted == connects  # no broker call while paused
    rows = [_row(job) for job in later]
    assert {(r.reserved_until, r.published_at) for r in rows} == {(None, None)}  # the relay's
    print(
        f"first submit {first_seconds * 1000:.0f} ms, the next 20 at most {slowest * 1000:.0f} ms"
    )

    point_celery(session_redis.url)  # the broker is back: the relay publishes them all
    result = outbox_relay_batch()
    assert result.published == 20 and not breaker.probing()
    fresh = jobs.submit(kind="noop", input={"n": "after"}, owner=user)
    assert _row(fresh).published_at is not None or _row(fresh).reserved_until is not None


def test_after_the_pause__the_probe_runs_in_the_publisher_thread__a_failure_doubles_it(
    dead_broker: ClosingBroker, user: Any
) -> None:
    jobs.submit(kind="noop", input={"n": 0}, owner=user)
    first_pause = breaker.pause
    assert breaker.paused()

    threads: list[str] = []
    real = fastpath._Publisher.run

    def run(self: Any) -> None:
        threads.append(threading.current_thread().name)
        real(self)

    with mock.patch.object(fastpath._Publisher, "run", run):
        breaker.until = time.monotonic()  # the pause is over: the next row probes
        assert not breaker.paused() and breaker.probing()
        probe = jobs.submit(kind="noop", input={"n": "probe"}, owner=user)
        try:
            wait_until(lambda: breaker.paused(), timeout=30, what="the probe to fail")
        finally:
            fastpath.stop()  # the publisher's thread and its database connection end here
    assert threads == [fastpath._Publisher.thread_name]  # not the submitting thread
    assert breaker.pause == min(breaker_module.PAUSE_MAX, 2 * first_pause)
    assert _row(probe).published_at is None and _row(probe).reserved_until is None


def test_a_forked_child_starts_unpaused() -> None:
    import os

    breaker.failed("ConnectionRefusedError: test")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once, no test machinery
        os.write(write, b"1" if breaker.probing() else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"0"
    assert breaker.probing()  # the parent's stays
