"""Thin Celery entry points for the relay and its housekeeping."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from .conf import outbox_settings
from .relay import outbox_relay_until_empty
from .services import outbox_prune


# send_events=False: a tick a second would fill Flower's task list (it shows what workers
# broadcast) and push the jobs' own tasks off its first page; the ticks' results are stored
# (django-celery-results) and the relay's work shows in /metrics and /ops/.
@shared_task(name="outbox.relay_tick", ignore_result=False, send_events=False)
def relay_tick() -> dict[str, Any]:
    result = outbox_relay_until_empty(time_budget=max(outbox_settings.RELAY_INTERVAL * 5, 5.0))
    return {"published": result.published, "failed": result.failed, "errors": result.errors[:5]}


@shared_task(name="outbox.prune", ignore_result=False)
def prune() -> dict[str, int]:
    return {"deleted": outbox_prune()}
