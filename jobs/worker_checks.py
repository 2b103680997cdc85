"""Start-up checks for a worker: refuse settings under which redelivery would race a live task.

`jobs.execute` carries its own acks_late, reject_on_worker_lost and time limits, so the host
project's other tasks keep theirs. What a worker must still get right, and what is checked
here for every worker that consumes a jobs queue in any project (`worker_init`, connected by
`JobsConfig.ready`): the task's options were not overridden, prefetch is 1, and the hard time
limit ends well before the broker redelivers (Redis `visibility_timeout`, RabbitMQ
`consumer_timeout`). Celery's default prefetch (4) is lowered to 1 for such a worker, so a
project sets nothing; any other value than 1 is refused, as it was chosen on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .conf import jobs_settings

SAFETY_MARGIN = 0.8  # the hard limit must end well before the broker redelivers
CELERY_DEFAULT_PREFETCH = 4  # Celery's worker_prefetch_multiplier when nobody set one


class UnsafeWorkerSettings(RuntimeError):
    """The worker's settings would let the broker redeliver a task that is still running."""


@dataclass(frozen=True)
class WorkerDelivery:
    """What decides whether a worker may run jobs: the task's options and the worker's."""

    acks_late: bool
    reject_on_worker_lost: bool
    time_limit: float | None
    prefetch_multiplier: int
    broker_url: str
    transport_options: dict[str, Any]


def redelivery_window(broker_url: str, transport_options: dict[str, Any]) -> float | None:
    if broker_url.startswith(("redis://", "rediss://", "redis+socket://")):
        return float(transport_options.get("visibility_timeout", 3600))
    if broker_url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return float(jobs_settings.RABBITMQ_CONSUMER_TIMEOUT)
    return None


def check_worker_settings(delivery: WorkerDelivery) -> None:
    """Raise UnsafeWorkerSettings unless acks_late & co. and the time limits are sound."""
    problems = []
    if not delivery.acks_late:
        problems.append(
            "jobs.execute must ack late (acks_late=True: ack after the outcome commits)"
        )
    if not delivery.reject_on_worker_lost:
        problems.append("jobs.execute must have reject_on_worker_lost=True")
    if delivery.prefetch_multiplier != 1:
        problems.append(
            f"worker_prefetch_multiplier must be 1 for a worker of a jobs queue "
            f"(got {delivery.prefetch_multiplier})"
        )
    limit = delivery.time_limit
    if not limit:
        problems.append("task_time_limit (JOBS_TASK_TIME_LIMIT) must be set")
    window = redelivery_window(delivery.broker_url, delivery.transport_options)
    if limit and window is not None and limit >= window * SAFETY_MARGIN:
        problems.append(
            f"task_time_limit={limit:g}s is not comfortably below the broker's redelivery "
            f"window ({window:g}s); keep it under {window * SAFETY_MARGIN:.0f}s (the limit of "
            f"jobs.execute_many counts: JOBS_TASK_TIME_LIMIT + JOBS_BATCH_BUDGET_SECONDS)"
        )
    if problems:
        raise UnsafeWorkerSettings("refusing to start: " + "; ".join(problems))


def jobs_queues() -> set[str]:
    """Every queue a job can be published to: JOBS_QUEUE and each kind's own."""
    from . import registry

    return {jobs_settings.QUEUE, *registry.queues()}


def worker_prefetch_lowered(worker: Any) -> bool:
    """Lower Celery's default prefetch to 1 on a starting worker (before its consumer
    exists); True when it did. Any other value is left for the check to refuse."""
    if getattr(worker, "prefetch_multiplier", None) != CELERY_DEFAULT_PREFETCH:
        return False
    worker.prefetch_multiplier = 1
    return True


def worker_delivery(worker: Any) -> WorkerDelivery | None:
    """The delivery settings of a starting worker, or None when it consumes no jobs queue."""
    from outbox.transport import broker_url

    app = worker.app
    consumed = set(app.amqp.queues.consume_from or app.amqp.queues)
    if not consumed & jobs_queues():
        return None
    task = app.tasks["jobs.execute"]
    batch = app.tasks["jobs.execute_many"]
    limits = [t.time_limit or app.conf.task_time_limit for t in (task, batch)]
    return WorkerDelivery(
        acks_late=bool(task.acks_late and batch.acks_late),
        reject_on_worker_lost=bool(task.reject_on_worker_lost and batch.reject_on_worker_lost),
        # The larger of the two: a batch's own limit adds JOBS_BATCH_BUDGET_SECONDS.
        time_limit=None if None in limits else max(limits),
        prefetch_multiplier=int(
            getattr(worker, "prefetch_multiplier", app.conf.worker_prefetch_multiplier)
        ),
        broker_url=broker_url(app),
        transport_options=dict(app.conf.broker_transport_options or {}),
    )
