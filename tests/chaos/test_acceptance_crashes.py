"""Crashes around acceptance and relay: no accepted job is lost, a duplicate publish is harmless."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from jobs.counters import DUPLICATE_DELIVERIES, counter_value
from jobs.models import Job, JobEvent
from outbox.models import OutboxEntry
from tests.harness import Harness, wait_until
from tests.harness import broker_job_ids as harness_broker_job_ids

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

SUBMIT_SCRIPT = """
import django
django.setup()
from django.contrib.auth import get_user_model
import jobs
user = get_user_model().objects.get(username="alice")
jobs.submit(kind="noop", input={"crash": "after commit"}, owner=user, idempotency_key="crash-1")
print("publish returned")
"""


def broker_job_ids(harness: Harness, queue: str = "jobs") -> list[str]:
    return harness_broker_job_ids(harness.broker_url, queue)


def _two_messages_run_the_job_once(harness: Harness, job: Job, worker: str) -> None:
    """A worker takes both messages of `job`: the first runs it (generation 1), the second
    is counted as a duplicate delivery and acked; one lease event, one success."""
    harness.start_worker(worker)
    wait_until(
        lambda: counter_value(DUPLICATE_DELIVERIES) == 1,
        timeout=60,
        what="the second delivery to be counted as a duplicate",
    )
    wait_until(lambda: broker_job_ids(harness) == [], timeout=30, what="both messages consumed")
    finished = Job.objects.get(pk=job.pk)
    assert (finished.state, finished.generation, finished.attempt) == ("succeeded", 1, 1)
    assert JobEvent.objects.filter(job=job, to_state="leased").count() == 1
    assert JobEvent.objects.filter(job=job, to_state="succeeded").count() == 1


def test_submit_killed_after_commit_before_publish__relay_publishes_it_later(
    harness: Harness, user: Any
) -> None:
    env = harness.base_env(
        JOBS_FAILPOINTS="submit.after_commit_before_publish=exit",
        # The fast path reserves its row; keep the reservation short so the relay may take it.
        OUTBOX_RESERVATION_SECONDS="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", SUBMIT_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 137, done.stderr
    assert "publish returned" not in done.stdout
    job = Job.objects.get(owner=user, idempotency_key="crash-1")
    entry = OutboxEntry.objects.get(job_id=job.pk)
    assert job.state == "queued"
    assert entry.published_at is None
    assert broker_job_ids(harness) == []

    harness.start_relay()
    wait_until(
        lambda: OutboxEntry.objects.get(pk=entry.pk).published_at is not None,
        timeout=60,
        what="the relay to publish the orphaned row",
    )
    assert broker_job_ids(harness) == [str(job.pk)]

    harness.start_worker("w-accept")
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=60, what="the job to run"
    )
    assert Job.objects.get(pk=job.pk).generation == 1


# Another thread is inside jobs.submit (writing(), held open): company, so the submitted row
# goes to the process's publisher thread, which dies at its failpoint before publishing.
SUBMIT_WITH_COMPANY_SCRIPT = """
import threading, time
import django
django.setup()
from django.contrib.auth import get_user_model
import jobs
from outbox import fastpath
inside = threading.Event()
def company():
    with fastpath.writing():
        inside.set()
        time.sleep(60)
threading.Thread(target=company, daemon=True).start()
inside.wait(10)
user = get_user_model().objects.get(username="alice")
jobs.submit(kind="noop", input={"crash": "publisher"}, owner=user, idempotency_key="crash-2")
print("submit returned", flush=True)
time.sleep(60)
"""


def test_submit_process_killed_while_its_publisher_holds_the_row__relay_publishes_it_later(
    harness: Harness, user: Any
) -> None:
    env = harness.base_env(
        JOBS_FAILPOINTS="submit.publisher_before_publish=exit", OUTBOX_RESERVATION_SECONDS="1"
    )
    done = subprocess.run(
        [sys.executable, "-c", SUBMIT_WITH_COMPANY_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 137, done.stderr
    assert "submit returned" in done.stdout  # the caller had its answer: the job is accepted
    job = Job.objects.get(owner=user, idempotency_key="crash-2")
    entry = OutboxEntry.objects.get(job_id=job.pk)
    assert (job.state, entry.published_at) == ("queued", None)
    assert broker_job_ids(harness) == []

    harness.start_relay()
    wait_until(
        lambda: OutboxEntry.objects.get(pk=entry.pk).published_at is not None,
        timeout=60,
        what="the relay to publish the row the publisher held",
    )
    harness.start_worker("w-publisher")
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=60, what="the job to run"
    )
    finished = Job.objects.get(pk=job.pk)
    assert (finished.generation, finished.attempt) == (1, 1)


def test_relay_killed_after_publish_before_mark__duplicate_message_runs_the_job_once(
    harness: Harness, user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False  # only the relay publishes here
    from jobs import submit

    job = submit(kind="noop", input={}, owner=user)
    entry = OutboxEntry.objects.get(job_id=job.pk)

    doomed = harness.start_relay(
        JOBS_FAILPOINTS="relay.after_publish_before_mark=exit", OUTBOX_RESERVATION_SECONDS="1"
    )
    wait_until(lambda: not doomed.alive(), timeout=60, what="the relay to crash at its failpoint")
    assert doomed.popen.returncode == 137
    assert broker_job_ids(harness) == [str(job.pk)]
    assert OutboxEntry.objects.get(pk=entry.pk).published_at is None

    harness.start_relay()
    wait_until(
        lambda: OutboxEntry.objects.get(pk=entry.pk).published_at is not None,
        timeout=60,
        what="a second relay to publish the row again",
    )
    assert broker_job_ids(harness) == [str(job.pk), str(job.pk)]
    assert OutboxEntry.objects.get(pk=entry.pk).publish_attempts == 2

    _two_messages_run_the_job_once(harness, job, "w-dup")


def _published_unmarked_then_relay_and_worker(
    harness: Harness, user: Any, script: str, **env: str
) -> None:
    """Run `script` in a process that dies with its message published but its row unmarked;
    the relay publishes the row again once its reservation lapses; the second delivery is a
    duplicate the claim absorbs."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=harness.base_env(OUTBOX_RESERVATION_SECONDS="1", **env),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 137, done.stderr
    job = Job.objects.get(owner=user, idempotency_key="crash-1")
    entry = OutboxEntry.objects.get(job_id=job.pk)
    assert entry.published_at is None and entry.publish_attempts == 0
    assert broker_job_ids(harness) == [str(job.pk)]

    harness.start_relay()
    wait_until(
        lambda: OutboxEntry.objects.get(pk=entry.pk).published_at is not None,
        timeout=60,
        what="the relay to publish the unmarked row once its reservation lapsed",
    )
    assert broker_job_ids(harness) == [str(job.pk), str(job.pk)]

    _two_messages_run_the_job_once(harness, job, "w-fast-dup")


def test_submit_killed_after_fast_path_publish_before_mark__relay_republishes_claim_absorbs(
    harness: Harness, user: Any
) -> None:
    """The fast path's own window: published from memory, killed before the mark is queued."""
    _published_unmarked_then_relay_and_worker(
        harness, user, SUBMIT_SCRIPT, JOBS_FAILPOINTS="relay.after_publish_before_mark=exit"
    )


def test_web_process_dies_with_marks_queued__relay_republishes_claim_absorbs(
    harness: Harness, user: Any
) -> None:
    """The submit returned (202 given, message published); the process dies before its mark
    thread marks the row (outbox/marks.py batches them)."""
    script = SUBMIT_SCRIPT + "import os\nos._exit(137)\n"
    _published_unmarked_then_relay_and_worker(harness, user, script, OUTBOX_MARK_INTERVAL="60")


def test_relay_dies_after_reserving_before_publishing__another_relay_publishes_after_lapse(
    harness: Harness, user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    settings.OUTBOX_RESERVATION_SECONDS = 2
    from jobs import submit
    from outbox.relay import outbox_reserve_due

    job = submit(kind="noop", input={}, owner=user)
    # Step 1 of the relay protocol commits the reservation; a relay that dies right here
    # publishes nothing, so stopping after it is exactly that crash.
    reserved = outbox_reserve_due(limit=10)
    assert [row.job_id for row in reserved] == [job.pk]
    entry = OutboxEntry.objects.get(job_id=job.pk)
    assert entry.reserved_until is not None and entry.published_at is None

    harness.start_relay()
    wait_until(
        lambda: OutboxEntry.objects.get(pk=entry.pk).published_at is not None,
        timeout=60,
        what="another relay to publish once the reservation lapsed",
    )
    published = OutboxEntry.objects.get(pk=entry.pk)
    assert published.published_at is not None and published.published_at >= entry.reserved_until
    assert broker_job_ids(harness) == [str(job.pk)]


# Plain submits that queued behind another write share one commit (jobs.accept_group). The
# first submit is held, after its own write and publish, until three more have queued behind
# it; then the failpoint is armed and the first released: the group's writer commits the
# three jobs, wakes the other two (their callers may have their answer: committed), and the
# process dies before the group's publish, the writer's own caller unanswered.
GROUP_SCRIPT = """
import threading
import django
django.setup()
from django.contrib.auth import get_user_model
from django.db import connection
import jobs
from jobs import accept_group, submission
from outbox import failpoints
from tests.harness import wait_until

user = get_user_model().objects.get(username="alice")
accept_group.WAIT_SECONDS = 60.0  # the queued submits stay queued while the first is held
written, release = threading.Event(), threading.Event()
original = submission._submit_alone

def held(checked):
    job = original(checked)
    if checked.request.input == {"n": 0}:
        written.set()
        release.wait(60)
    return job

submission._submit_alone = held

def submit(n):
    jobs.submit(kind="noop", input={"n": n}, owner=user)
    print(f"submit {n} returned", flush=True)
    connection.close()

threads = [threading.Thread(target=submit, args=(0,))]
threads[0].start()
assert written.wait(60)
for n in (1, 2, 3):
    threads.append(threading.Thread(target=submit, args=(n,)))
    threads[-1].start()
wait_until(lambda: len(accept_group._accepts().queue) == 3, timeout=60, what="3 queued")
failpoints.configure("submit.after_commit_before_publish=exit")
print("group queued", flush=True)
release.set()
for thread in threads:
    thread.join(60)
print("every submit returned", flush=True)
"""


def test_accept_group_killed_after_its_commit_before_its_publish__relay_publishes_each_once(
    harness: Harness, user: Any
) -> None:
    env = harness.base_env(OUTBOX_RESERVATION_SECONDS="1")
    done = subprocess.run(
        [sys.executable, "-c", GROUP_SCRIPT], env=env, capture_output=True, text=True, timeout=180
    )

    assert done.returncode == 137, done.stdout + done.stderr
    assert "group queued" in done.stdout
    assert "every submit returned" not in done.stdout
    answered = [n for n in (1, 2, 3) if f"submit {n} returned" in done.stdout]
    assert len(answered) <= 2  # the writer died in its publish, before its own answer
    by_n = {job.input["n"]: job for job in Job.objects.filter(owner=user)}
    assert sorted(by_n) == [0, 1, 2, 3]  # the group's one statement committed
    group = [by_n[n] for n in (1, 2, 3)]
    rows = OutboxEntry.objects.filter(job_id__in=[job.pk for job in group])
    assert [(r.published_at, r.reserved_until is not None) for r in rows] == [(None, True)] * 3
    assert not {str(job.pk) for job in group} & set(broker_job_ids(harness))

    every = [job.pk for job in by_n.values()]
    harness.start_relay()
    wait_until(
        lambda: not OutboxEntry.objects.filter(job_id__in=every, published_at=None).exists(),
        timeout=60,
        what="the relay to publish the group's rows once their reservations lapsed",
    )
    harness.start_worker("w-group")
    wait_until(
        lambda: Job.objects.filter(owner=user, state="succeeded").count() == 4,
        timeout=60,
        what="the four jobs to run",
    )
    for job in Job.objects.filter(owner=user):
        assert (job.generation, job.attempt) == (1, 1), job.input
        assert JobEvent.objects.filter(job=job, to_state="succeeded").count() == 1, job.input
