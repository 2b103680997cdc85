"""outbox_relay and jobs_callbacks (outbox.management.loop.LoopCommand) without --loop: one
round, its line printed. Their --loop runs as daemons in tests/harness.py (the relay) and
tests/chaos/test_callback_crash.py (the sender)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command

import jobs
from outbox.models import OutboxEntry
from tests.conftest import point_celery_at

pytestmark = pytest.mark.django_db(transaction=True)


def _run(name: str) -> str:
    out = io.StringIO()
    call_command(name, stdout=out)
    return out.getvalue().strip()


def test_outbox_relay_once__publishes_the_due_rows_and_says_so(
    broker: Any, user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    job = jobs.submit(kind="noop", input={}, owner=user)

    assert _run("outbox_relay") == "published=1 failed=0"
    assert OutboxEntry.objects.get(job_id=job.pk).published_at is not None
    assert _run("outbox_relay") == "published=0 failed=0"


def test_jobs_callbacks_once__says_what_the_round_did() -> None:
    assert _run("jobs_callbacks").startswith("claimed=0 ")


def test_outbox_relay_once_with_no_broker__backs_the_row_off_and_says_failed(
    session_redis: Any, user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    job = jobs.submit(kind="noop", input={}, owner=user)
    point_celery_at("")
    try:
        assert _run("outbox_relay") == "published=0 failed=1"
    finally:
        point_celery_at(session_redis.url)
    assert "no broker URL" in OutboxEntry.objects.get(job_id=job.pk).last_error
