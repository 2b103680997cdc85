"""The sender's Celery task and its beat entry (added by JobsConfig.ready)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from jobs.conf import jobs_settings

SEND_TASK = "jobs.maintenance.callbacks"


# Every JOBS_CALLBACK_INTERVAL (1 s): no task events, as the other frequent beat tasks.
@shared_task(name=SEND_TASK, ignore_result=False, send_events=False)
def callbacks_send() -> dict[str, int]:
    """Beat: send the due completion callbacks (jobs.callbacks.delivery)."""
    from .delivery import callbacks_send_due

    return callbacks_send_due().as_dict()


def callbacks_schedule() -> dict[str, dict[str, Any]]:
    interval = float(jobs_settings.CALLBACK_INTERVAL)
    return {
        "jobs-callbacks": {
            "task": SEND_TASK,
            "schedule": interval,
            # A run that waited this long is superseded by the next one.
            "options": {"expires": max(interval * 5, 10)},
        }
    }
