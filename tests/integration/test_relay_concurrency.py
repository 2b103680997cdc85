"""Two relays (or two beats) at once on 2,000 committed rows: every row published, none lost."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import pytest
from django.db import transaction

import jobs
from jobs.models import Job
from outbox.models import OutboxEntry
from tests.harness import Harness, Proc, wait_until
from tests.harness import broker_job_ids as harness_broker_job_ids

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

ROWS = 2000


def broker_job_ids(harness: Harness, queue: str = "jobs") -> list[str]:
    return harness_broker_job_ids(harness.broker_url, queue)


def submit_rows(user: Any) -> set[str]:
    """2,000 jobs accepted in one transaction: their rows become visible to relays at once."""
    with transaction.atomic():
        return {str(jobs.submit(kind="noop", input={"n": n}, owner=user).pk) for n in range(ROWS)}


def published_by(proc: Proc) -> int:
    return sum(int(n) for n in re.findall(r"published=(\d+)", proc.log()))


def assert_every_job_published_once_at_least(harness: Harness, job_ids: set[str]) -> Counter[str]:
    wait_until(
        lambda: not OutboxEntry.objects.filter(published_at__isnull=True).exists(),
        timeout=180,
        interval=0.2,
        what="every outbox row to be published",
    )
    messages = Counter(broker_job_ids(harness))
    assert set(messages) == job_ids  # none lost, nothing foreign
    assert OutboxEntry.objects.filter(published_at__isnull=False).count() == ROWS
    return messages


def test_two_relays_at_once_on_2000_rows__every_row_published_none_lost(
    harness: Harness, user: Any, settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.OUTBOX_FAST_PATH = False  # only the relays publish
    relays = [harness.start_relay(interval=0.05, OUTBOX_RELAY_BATCH_SIZE="100") for _ in range(2)]
    wait_until(lambda: all(r.alive() for r in relays), timeout=10, what="relays up")

    job_ids = submit_rows(user)
    started = time.monotonic()
    messages = assert_every_job_published_once_at_least(harness, job_ids)
    elapsed = time.monotonic() - started

    duplicates = sum(messages.values()) - len(messages)
    # Each relay's log says how many it published; together they account for every message.
    wait_until(
        lambda: sum(published_by(r) for r in relays) == sum(messages.values()),
        timeout=30,
        what="relay logs to account for every message",
    )
    assert Job.objects.filter(state="queued").count() == ROWS
    with capsys.disabled():
        print(
            f"\n[two relays] {ROWS} rows in {elapsed:.2f}s, messages={sum(messages.values())} "
            f"duplicates={duplicates} split={[published_by(r) for r in relays]}"
        )


def test_two_beats_at_once_on_2000_rows__every_row_published_none_lost(
    harness: Harness, user: Any, settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    settings.OUTBOX_FAST_PATH = False
    tick = {"OUTBOX_RELAY_INTERVAL": "0.5", "OUTBOX_RELAY_BATCH_SIZE": "100"}
    # Two schedulers sending relay ticks, two maintenance workers running them concurrently.
    harness.start_worker("maint-1", queues="jobs.maintenance", env=tick)
    harness.start_worker("maint-2", queues="jobs.maintenance", env=tick)
    beats = [harness.start_beat(f"beat-{n}", env=tick) for n in (1, 2)]

    job_ids = submit_rows(user)
    started = time.monotonic()
    messages = assert_every_job_published_once_at_least(harness, job_ids)
    elapsed = time.monotonic() - started

    assert all(b.alive() for b in beats)
    wait_until(
        lambda: all("outbox.relay_tick" in b.log() for b in beats),
        timeout=30,
        what="both beats to have sent relay ticks",
    )
    duplicates = sum(messages.values()) - len(messages)
    with capsys.disabled():
        print(
            f"\n[two beats] {ROWS} rows in {elapsed:.2f}s, messages={sum(messages.values())} "
            f"duplicates={duplicates}"
        )
