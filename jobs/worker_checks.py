"""Start-up checks for a worker: refuse settings under which redelivery would race a live task."""

from __future__ import annotations

from typing import Any

from django.conf import settings

SAFETY_MARGIN = 0.8  # the hard limit must end well before the broker redelivers


class UnsafeWorkerSettings(RuntimeError):
    """The worker's settings would let the broker redeliver a task that is still running."""


def redelivery_window(broker_url: str, transport_options: dict[str, Any]) -> float | None:
    if broker_url.startswith(("redis://", "rediss://", "redis+socket://")):
        return float(transport_options.get("visibility_timeout", 3600))
    if broker_url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return float(settings.JOBS_RABBITMQ_CONSUMER_TIMEOUT)
    return None


def check_worker_settings(conf: Any) -> None:
    """Raise UnsafeWorkerSettings unless acks_late & co. and the time limits are sound."""
    problems = []
    if not conf.task_acks_late:
        problems.append("task_acks_late must be True (ack after the outcome commits)")
    if not conf.task_reject_on_worker_lost:
        problems.append("task_reject_on_worker_lost must be True")
    if conf.worker_prefetch_multiplier != 1:
        problems.append("worker_prefetch_multiplier must be 1")
    limit = conf.task_time_limit
    if not limit:
        problems.append("task_time_limit (JOBS_TASK_TIME_LIMIT) must be set")
    window = redelivery_window(str(conf.broker_url), dict(conf.broker_transport_options or {}))
    if limit and window is not None and limit >= window * SAFETY_MARGIN:
        problems.append(
            f"task_time_limit={limit}s is not comfortably below the broker's redelivery window "
            f"({window}s); keep it under {window * SAFETY_MARGIN:.0f}s"
        )
    if problems:
        raise UnsafeWorkerSettings("refusing to start: " + "; ".join(problems))
