"""The raw Celery baseline: a no-op task with the durable worker's delivery settings.

Same broker, same serializer, acks_late, reject_on_worker_lost, prefetch 1 and time limits as
jobsite.celery; no Django, no database: what Celery alone costs per message.
"""

from __future__ import annotations

import os

from celery import Celery

RAW_QUEUE = "raw"

app = Celery("bench_raw", broker=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    task_default_queue=RAW_QUEUE,
    worker_send_task_events=False,
    task_send_sent_event=False,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    task_time_limit=900,
    task_soft_time_limit=840,
    broker_transport_options={"visibility_timeout": 3600},
)


@app.task(name="raw.noop", ignore_result=True, acks_late=True)
def noop(job_id: str, generation: int | None = None) -> None:
    """Does nothing: the message carries an id, like jobs.execute's."""
    return None
