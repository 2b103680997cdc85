"""Plain submits that arrive together share one commit (jobs.accept_group); a group's failure
is nobody else's, and nobody is written twice.

Each test holds the first submit inside its write until the others have queued behind it, so
which submits form a group is decided, not raced."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.test import override_settings

import jobs
from jobs import accept_group, bulk, submission
from jobs.models import Job, JobEvent
from outbox import fastpath, marks
from outbox.models import OutboxEntry
from tests.harness import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Submits:
    """Threads that each submit one job; `results[i]`: its Job or its exception."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.results: dict[int, Job | BaseException] = {}

    def start(self, index: int, owner: Any) -> None:
        """A thread submitting a job with input {"n": index}."""

        def submit() -> None:
            try:
                self.results[index] = jobs.submit(kind="noop", input={"n": index}, owner=owner)
            except BaseException as exc:  # the test reads it
                self.results[index] = exc
            finally:
                connection.close()  # each thread owns its connection

        thread = threading.Thread(target=submit, name=f"submit-{index}")
        self.threads.append(thread)
        thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)
        assert not any(t.is_alive() for t in self.threads), "a submit never returned"


alone_writes: list[dict[str, Any]] = []  # the input of every submit written alone


@pytest.fixture
def held_first(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The first submit written alone waits in its write until the event is set; every alone
    write is counted in `alone_writes`."""
    release = threading.Event()
    original = submission._submit_alone
    first = threading.Lock()

    def held(checked: Any) -> Job:
        alone_writes.append(checked.request.input)
        if first.acquire(blocking=False):
            assert release.wait(30)
        return original(checked)

    alone_writes.clear()
    monkeypatch.setattr(submission, "_submit_alone", held)
    monkeypatch.setattr(accept_group, "WAIT_SECONDS", 30.0)  # queued stays queued while held
    yield release
    release.set()


@pytest.fixture
def group_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every group written column-wise in one statement."""
    sizes: list[int] = []
    original = bulk.jobs_insert_plain_statement

    def counted(submits: Any) -> Any:
        sizes.append(len(submits))
        return original(submits)

    monkeypatch.setattr(bulk, "jobs_insert_plain_statement", counted)
    return sizes


def _queued(n: int) -> Callable[[], bool]:
    return lambda: len(accept_group._accepts().queue) == n


def _rows_of(job: Job) -> tuple[int, int, int]:
    return (
        Job.objects.filter(pk=job.pk).count(),
        JobEvent.objects.filter(job_id=job.pk, reason="accepted").count(),
        OutboxEntry.objects.filter(job_id=job.pk).count(),
    )


def first_held(owner: Any) -> Submits:
    """Submit 0 started, and in its write (held there by `held_first`)."""
    submits = Submits()
    submits.start(0, owner)
    wait_until(lambda: len(alone_writes) == 1, timeout=10, what="the first write")
    return submits


def behind_a_held_write(owners: list[Any], release: threading.Event) -> Submits:
    """Submit 0 (of owners[0]) held in its write while submits 1.. (of the other owners) queue
    behind it; then the write goes on, and every submit returns."""
    submits = first_held(owners[0])
    for index, owner in enumerate(owners[1:], start=1):
        submits.start(index, owner)
    wait_until(_queued(len(owners) - 1), timeout=10, what="the others queued")
    release.set()
    submits.join()
    return submits


def test_submits_queued_behind_a_write__one_group_one_commit__each_gets_its_own_job(
    user: Any, held_first: threading.Event, group_sizes: list[int]
) -> None:
    submits = behind_a_held_write([user] * 6, held_first)

    assert group_sizes == [5]
    assert len(alone_writes) == 1  # only the first wrote alone
    returned = [submits.results[i] for i in range(6)]
    assert all(isinstance(job, Job) for job in returned), returned
    assert sorted(job.input["n"] for job in returned) == list(range(6))  # type: ignore[union-attr]
    for job in returned:
        assert isinstance(job, Job) and not job.replayed
        assert _rows_of(job) == (1, 1, 1)
        assert job.input == Job.objects.get(pk=job.pk).input
    assert Job.objects.count() == 6
    # The group's rows went out after its commit, as the fast path publishes any.
    assert fastpath.flush()
    marks.flush()
    assert not OutboxEntry.objects.filter(published_at__isnull=True).exists()


def test_a_group_that_fails__each_written_alone__only_the_bad_one_fails(
    user: Any, held_first: threading.Event, group_sizes: list[int]
) -> None:
    ghost = User(pk=user.pk + 10_000, username="ghost")  # no such row: a deferred FK fails
    ghost._state.adding = False
    submits = behind_a_held_write([user, user, ghost, user], held_first)

    assert group_sizes == [3]  # tried together, refused at commit
    assert sorted(item["n"] for item in alone_writes) == [0, 1, 2, 3]  # then each alone
    assert isinstance(submits.results[2], IntegrityError), submits.results[2]
    for index in (0, 1, 3):
        job = submits.results[index]
        assert isinstance(job, Job), job
        assert _rows_of(job) == (1, 1, 1)
    assert Job.objects.count() == 3
    assert not Job.objects.filter(owner_id=ghost.pk).exists()


def test_a_publish_failing_after_the_group_commit__every_job_returned__nobody_written_again(
    user: Any,
    held_first: threading.Event,
    group_sizes: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fail(entries: Any) -> None:
        raise RuntimeError("the publish failed")

    monkeypatch.setattr(accept_group, "outbox_after_commit_many", fail)
    submits = behind_a_held_write([user] * 3, held_first)

    assert group_sizes == [2]
    assert len(alone_writes) == 1
    assert all(isinstance(submits.results[i], Job) for i in range(3)), submits.results
    assert Job.objects.count() == 3 and JobEvent.objects.count() == 3
    # Unpublished and still reserved: the relay publishes them once the reservation lapses.
    grouped = [submits.results[1].pk, submits.results[2].pk]  # type: ignore[union-attr]
    rows = OutboxEntry.objects.filter(job_id__in=grouped)
    assert [(r.published_at, r.reserved_until is not None) for r in rows] == [(None, True)] * 2


@override_settings(JOBS_ACCEPT_GROUP_MAX=2)
def test_a_queue_longer_than_the_most_a_group_takes__written_in_turns(
    user: Any, held_first: threading.Event, group_sizes: list[int]
) -> None:
    submits = behind_a_held_write([user] * 6, held_first)

    # Groups of at most 2 in turn; a last one alone is written by its own thread.
    assert sorted(group_sizes, reverse=True) == [2, 2]
    assert len(alone_writes) == 2
    assert all(isinstance(submits.results[i], Job) for i in range(6)), submits.results
    assert Job.objects.count() == 6 == OutboxEntry.objects.count()


@override_settings(JOBS_ACCEPT_GROUP_MAX=1)
def test_group_max_1__every_submit_written_alone(
    user: Any, held_first: threading.Event, group_sizes: list[int]
) -> None:
    submits = first_held(user)
    submits.start(1, user)
    submits.start(2, user)
    # Nobody queues: both write alone beside the held one.
    wait_until(lambda: len(alone_writes) == 3, timeout=10, what="three alone writes")
    held_first.set()
    submits.join()
    assert group_sizes == []
    assert Job.objects.count() == 3


def test_a_submit_inside_the_callers_transaction__never_grouped__rolls_back_with_it(
    user: Any, held_first: threading.Event, group_sizes: list[int]
) -> None:
    submits = first_held(user)
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.submit(kind="noop", input={"n": 99}, owner=user)
        assert accept_group._accepts().queue == []  # written in the caller's transaction
        raise RuntimeError("the caller's own work failed")
    held_first.set()
    submits.join()
    assert group_sizes == []
    assert list(Job.objects.values_list("input", flat=True)) == [{"n": 0}]


def test_keyed_submits__never_grouped(
    user: Any, held_first: threading.Event, group_sizes: list[int]
) -> None:
    results: list[Job] = []

    def keyed() -> None:
        try:
            results.append(
                jobs.submit(kind="noop", input={"n": 1}, owner=user, idempotency_key="k-1")
            )
        finally:
            connection.close()

    submits = first_held(user)
    thread = threading.Thread(target=keyed)
    thread.start()
    wait_until(lambda: len(alone_writes) == 2, timeout=10, what="the keyed write, alone")
    assert accept_group._accepts().queue == []
    held_first.set()
    thread.join(30)
    submits.join()
    assert group_sizes == [] and len(results) == 1
    assert Job.objects.count() == 2


def test_a_write_that_takes_too_long__the_queued_submit_leaves_the_queue_and_writes_alone(
    user: Any,
    held_first: threading.Event,
    group_sizes: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(accept_group, "WAIT_SECONDS", 0.2)
    submits = first_held(user)
    submits.start(1, user)
    # Written alone beside the held write, which has not ended.
    wait_until(lambda: isinstance(submits.results.get(1), Job), timeout=10, what="submit 1")
    assert 0 not in submits.results and accept_group._accepts().queue == []
    held_first.set()
    submits.join()
    assert group_sizes == [] and len(alone_writes) == 2
    assert Job.objects.count() == 2
