"""Maintenance on the project's own beat: no schedule to copy, safe with two beats."""

from __future__ import annotations

from typing import Any

from .conf import outbox_settings
from .transport import celery_app


def maintenance_schedule_add(entries: dict[str, dict[str, Any]]) -> None:
    """Add `entries` to the Celery app's beat schedule, on the maintenance queue.

    An entry the project defined under the same name wins; OUTBOX_BEAT_SCHEDULE = False adds
    nothing (for a project that schedules these tasks itself). The project's own dict is not
    modified: the app gets a merged copy.
    """
    if not outbox_settings.BEAT_SCHEDULE:
        return
    app = celery_app()
    current = dict(app.conf.beat_schedule or {})
    queue = outbox_settings.MAINTENANCE_QUEUE
    for name, entry in entries.items():
        if name not in current:
            options = {"queue": queue, **entry.get("options", {})}
            current[name] = {**entry, "options": options}
    app.conf.beat_schedule = current


def outbox_schedule() -> dict[str, dict[str, Any]]:
    """The relay's safety-net sweep and the pruner."""
    interval = outbox_settings.RELAY_INTERVAL
    return {
        "outbox-relay": {
            "task": "outbox.relay_tick",
            "schedule": interval,
            # A sweep that waited five intervals is stale: the next one does the same work.
            "options": {"expires": max(interval * 5, 5)},
        },
        "outbox-prune": {"task": "outbox.prune", "schedule": 3600.0},
    }
