"""The raw Celery baseline: a no-op task with the durable worker's delivery settings.

Same broker, same serializer, acks_late, reject_on_worker_lost, prefetch 1 and time limits as
jobsite.celery; no Django, no database: what Celery alone costs per message.

With BENCH_RAW_TIMES_DIR set (the backlog drain, bench/backlog.py), each pool process also
keeps the time its first task started and its last task ended, overwritten in place in
`<dir>/<pid>` after every task (one pwrite: microseconds, against a job's milliseconds), so
the drain is timed from first start to last end as the durable side is from its database.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun

RAW_QUEUE = "raw"

# Not the current app: the bench driver imports this module, and durable-jobs publishes
# through the current app (outbox.transport), which must stay jobsite's in the driver too.
app = Celery(
    "bench_raw",
    broker=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/0"),
    set_as_current=False,
)
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


STAMP_FILE = os.environ.get("BENCH_RAW_STAMP_FILE", "")


@app.task(name="raw.stamp", ignore_result=True, acks_late=True)
def stamp(job_id: str, generation: int | None = None) -> None:
    """The latency scenario's raw Celery task: notes when it started (the first thing it
    does), appended to BENCH_RAW_STAMP_FILE as `<job_id> <epoch>`, after the time is taken."""
    started = time.time()
    fd = os.open(STAMP_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, f"{job_id} {started:.6f}\n".encode())
    finally:
        os.close(fd)


def read_stamps(path: str) -> dict[str, float]:
    """job_id -> when `raw.stamp` started, from BENCH_RAW_STAMP_FILE."""
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return {job_id: float(at) for job_id, at in (line.split() for line in handle if line)}


TIMES_DIR = os.environ.get("BENCH_RAW_TIMES_DIR", "")
_span: dict[str, Any] = {}  # this pool process's first start, last end and file


def _first_start(**kwargs: Any) -> None:
    if _span.get("pid") != os.getpid():
        path = os.path.join(TIMES_DIR, str(os.getpid()))
        _span.update(pid=os.getpid(), first=time.time(), fd=os.open(path, os.O_WRONLY | os.O_CREAT))


def _last_end(**kwargs: Any) -> None:
    if _span.get("pid") == os.getpid():
        os.pwrite(_span["fd"], f"{_span['first']:20.6f} {time.time():20.6f}\n".encode(), 0)


if TIMES_DIR:  # only then: a receiver costs every task a call, and the e2e rounds none
    task_prerun.connect(_first_start, weak=False)
    task_postrun.connect(_last_end, weak=False)


def read_times(directory: str) -> tuple[float, float, int]:
    """(first start, last end, pool processes that ran a task) written under `directory`."""
    spans = []
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as handle:
            first, last = handle.read().split()
        spans.append((float(first), float(last)))
    if not spans:
        raise RuntimeError(f"no raw task recorded its times in {directory}")
    return min(s[0] for s in spans), max(s[1] for s in spans), len(spans)
