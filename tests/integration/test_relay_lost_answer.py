"""A relay reservation whose answer was lost (the commit went through, the connection did not
bring the answer back: a failover, a reset) holds its rows for OUTBOX_RESERVATION_SECONDS from
every other relay, but not from the process that made it: its next reservation takes the rows
of that token back at once (outbox.relay). Read back from the suite's private Redis."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.utils import timezone

import jobs
from outbox import failpoints, relay
from outbox.failpoints import FailpointTriggered
from outbox.models import OutboxEntry
from outbox.relay import outbox_relay_batch
from tests.harness import queue_length
from tests.integration.test_relay_batching import broker_messages, job_ids_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def relay_only(settings: Any) -> Iterator[None]:
    """Rows wait for the relay; this process starts with no unanswered reservation."""
    settings.OUTBOX_FAST_PATH = False
    relay._unanswered.clear()
    yield
    failpoints.configure("")
    relay._unanswered.clear()


def _lose_the_answer_of_a_reservation() -> list[OutboxEntry]:
    """A relay batch whose reservation commits, then raises as a lost answer would."""
    failpoints.configure("relay.after_reserve=raise")
    with pytest.raises(FailpointTriggered):
        outbox_relay_batch()
    failpoints.configure("")
    rows = list(OutboxEntry.objects.filter(published_at__isnull=True))
    assert rows and all(r.reserved_until and r.reserved_until > timezone.now() for r in rows)
    assert len({r.reserved_by for r in rows}) == 1 and rows[0].reserved_by is not None
    return rows


def test_the_process_that_lost_the_answer__publishes_the_rows_at_its_next_reservation(
    user: Any, broker: redis.Redis, relay_only: None
) -> None:
    submitted = [jobs.submit(kind="noop", input={}, owner=user) for _ in range(3)]
    held = _lose_the_answer_of_a_reservation()
    assert queue_length(broker) == 0  # nothing was published

    result = outbox_relay_batch()

    assert (result.reserved, result.published, result.failed) == (3, 3, 0)
    carried = [job_id for message in broker_messages(broker) for job_id in job_ids_of(message)]
    assert sorted(carried) == sorted(str(job.pk) for job in submitted)
    assert not OutboxEntry.objects.filter(published_at__isnull=True).exists()
    assert {r.job_id for r in held} == {job.pk for job in submitted}
    assert relay._unanswered == []  # taken back: the next reservation has nothing to rescue
    assert outbox_relay_batch().reserved == 0


def test_another_relay__still_waits_for_the_reservation_to_lapse(
    user: Any, broker: redis.Redis, relay_only: None
) -> None:
    jobs.submit(kind="noop", input={}, owner=user)
    _lose_the_answer_of_a_reservation()
    relay._unanswered.clear()  # what another process knows of that reservation: nothing

    assert outbox_relay_batch().reserved == 0
    assert queue_length(broker) == 0

    OutboxEntry.objects.update(reserved_until=timezone.now())  # the reservation lapses
    assert outbox_relay_batch().published == 1


def test_a_reservation_that_failed_before_its_commit__rescues_nothing_and_blocks_nothing(
    user: Any, broker: redis.Redis, relay_only: None
) -> None:
    relay._unanswered.append(uuid.uuid4())  # a token whose transaction never committed
    jobs.submit(kind="noop", input={}, owner=user)
    assert outbox_relay_batch().published == 1
    assert relay._unanswered == []
