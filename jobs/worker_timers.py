"""The worker's event-loop timer keeps only live entries.

Celery's prefork pool puts each task's soft (or hard) time limit on the worker's hub timer, and
when the task ends in time it only marks that entry cancelled: kombu's timer keeps a cancelled
entry in its heap until the entry falls due (Celery issues #1129 and #5200). With
`jobs.execute`'s soft limit of 840 s, the main process held the entries of every message of
the last 14 minutes, about 1 kB each: in the soak, 54 MB over 1.1 M jobs, and rate x limit
for good (at 1,000 messages a second, 0.8 GB).

Every `COMPACT_INTERVAL` seconds the heap is rebuilt without its cancelled entries. It runs as
an entry of that timer, on the event loop's thread, the only one that touches the heap.
"""

from __future__ import annotations

import heapq
import logging
from typing import Any

logger = logging.getLogger(__name__)

COMPACT_INTERVAL = 10.0
COMPACT_MIN = 256  # a heap this small is left alone


def timer_compact(timer: Any) -> int:
    """Drop the cancelled entries of a kombu `Timer`'s heap; returns how many went."""
    queue = getattr(timer, "_queue", None)
    if not isinstance(queue, list) or len(queue) < COMPACT_MIN:
        return 0
    live = [item for item in queue if not item.entry.canceled]
    dropped = len(queue) - len(live)
    if dropped:
        heapq.heapify(live)
        queue[:] = live  # in place: the timer's running iterator holds this very list
        logger.debug("durable-jobs: %d cancelled timer entries dropped", dropped)
    return dropped


def timer_keep_compact(consumer: Any) -> None:
    """worker_ready: compact the worker's hub timer from now on (a worker without an event
    loop, e.g. the solo or threads pool, has none and puts nothing on it)."""
    hub: Any = getattr(consumer, "hub", None)
    if hub is None:
        return
    timer = getattr(hub, "timer", None)
    if not isinstance(getattr(timer, "_queue", None), list):  # a kombu we do not know
        logger.warning(
            "durable-jobs: this kombu's hub timer has no heap we know; cancelled time limits "
            "stay until due (the worker's main process grows with its message rate)"
        )
        return
    hub.call_repeatedly(COMPACT_INTERVAL, timer_compact, timer)
