"""A project without a broker is told so at start-up, and nothing is published anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.db import transaction

from outbox.models import OutboxEntry
from outbox.relay import outbox_relay_batch
from outbox.services import outbox_enqueue
from outbox.transport import celery_app
from tests.harness import ROOT


def test_manage_check__no_broker_url__fails_naming_the_setting() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update({"CELERY_BROKER_URL": "", "DJANGO_SETTINGS_MODULE": "jobsite.settings"})

    run = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert run.returncode != 0
    assert "outbox.E002" in run.stderr
    assert "CELERY_BROKER_URL" in run.stderr


@pytest.mark.django_db(transaction=True)
def test_relay__no_broker_url__publishes_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    app = celery_app()
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    monkeypatch.setattr(app.conf, "broker_url", None)
    with transaction.atomic():
        entry = outbox_enqueue(task_name="outbox.prune", queue="jobs.maintenance")

    result = outbox_relay_batch()

    assert (result.published, result.failed) == (0, 1)
    entry = OutboxEntry.objects.get(pk=entry.pk)
    assert entry.published_at is None
    assert "has no broker URL" in entry.last_error
