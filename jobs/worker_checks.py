"""Start-up checks for a worker: refuse settings under which redelivery would race a live task.

`jobs.execute` carries its own acks_late, reject_on_worker_lost and time limits, so the host
project's other tasks keep theirs. What a worker must still get right, and what is checked
here for every worker that consumes a jobs queue in any project (`worker_init`, connected by
`JobsConfig.ready`): the task's options were not overridden, prefetch is at most the allowed
value, and every message it holds is acked well before the broker redelivers (Redis
`visibility_timeout`, RabbitMQ `consumer_timeout`).

The allowed prefetch is 1, or JOBS_BATCH_PREFETCH_MULTIPLIER (2) on a worker whose jobs queues
carry only kinds that may share a batch message (a single-job queue, with a kind of
`batch=False` or with caps, stays at 1). Celery's default prefetch (4) is lowered to the
allowed value for such a worker, so a project sets nothing; any value above it is refused,
as it was chosen on purpose. A prefetched message waits behind a running one before its own
run, unacked, so the hard time limit times the prefetch must end before the window.
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
    # The highest prefetch this worker may have, and why not more: its jobs queues that
    # carry a kind which never shares a batch message, each with such a kind.
    prefetch_allowed: int = 1
    single_job_queues: tuple[tuple[str, str], ...] = ()


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
    problems.extend(prefetch_problems(delivery))
    limit = delivery.time_limit
    if not limit:
        problems.append("task_time_limit (JOBS_TASK_TIME_LIMIT) must be set")
    window = redelivery_window(delivery.broker_url, delivery.transport_options)
    if limit and window is not None:
        problems.extend(time_limit_problems(limit, window, max(delivery.prefetch_multiplier, 1)))
    if problems:
        raise UnsafeWorkerSettings("refusing to start: " + "; ".join(problems))


def prefetch_problems(delivery: WorkerDelivery) -> list[str]:
    """A prefetch above what this worker's queues allow (1, or 2 on batch queues alone)."""
    prefetch, allowed = delivery.prefetch_multiplier, delivery.prefetch_allowed
    if 1 <= prefetch <= allowed:  # 0 is Celery's "no limit"
        return []
    if allowed > 1:
        return [
            f"worker_prefetch_multiplier must be at most {allowed} for a worker of batch "
            f"queues (JOBS_BATCH_PREFETCH_MULTIPLIER; got {prefetch})"
        ]
    problem = f"worker_prefetch_multiplier must be 1 for a worker of a jobs queue (got {prefetch})"
    if delivery.single_job_queues and jobs_settings.BATCH_PREFETCH_MULTIPLIER > 1:
        queues = delivery.single_job_queues
        named = ", ".join(f"{queue!r} (kind {kind!r})" for queue, kind in queues)
        problem += (
            f": JOBS_BATCH_PREFETCH_MULTIPLIER allows more only on a worker whose jobs queues "
            f"carry batch kinds alone, and {named} carries a kind that never shares a batch "
            f"message (batch=False or caps: its messages may be long single jobs)"
        )
    return [problem]


def time_limit_problems(limit: float, window: float, prefetch: int) -> list[str]:
    """A message held by a worker is acked within prefetch x the hard limit: each of the
    prefetch - 1 ahead of it on its pool process runs at most the limit, then it does."""
    if limit * prefetch < window * SAFETY_MARGIN:
        return []
    keep = window * SAFETY_MARGIN / prefetch
    held = "" if prefetch == 1 else f" x prefetch {prefetch} (a prefetched message waits)"
    return [
        f"task_time_limit={limit:g}s{held} is not comfortably below the broker's redelivery "
        f"window ({window:g}s); keep it under {keep:.0f}s (the limit of "
        f"jobs.execute_many counts: JOBS_TASK_TIME_LIMIT + JOBS_BATCH_BUDGET_SECONDS)"
    ]


def jobs_queues() -> set[str]:
    """Every queue a job can be published to: JOBS_QUEUE and each kind's own."""
    from . import registry

    return {jobs_settings.QUEUE, *registry.queues()}


def single_job_queues(queues: set[str]) -> tuple[tuple[str, str], ...]:
    """Each of `queues` that carries a registered kind which never shares a batch message
    (`dispatch.batch_spec`: batch=False, or caps), with one such kind, sorted."""
    from . import registry
    from .dispatch import batch_spec

    found: dict[str, str] = {}
    for kind in registry.kinds():
        for version in range(1, registry.kind_latest(kind).version + 1):
            spec = registry.kind_version(kind, version)
            if spec is None or spec.queue not in queues or spec.queue in found:
                continue
            if batch_spec({"kind": kind, "kind_version": version}) is None:
                found[spec.queue] = kind
    return tuple(sorted(found.items()))


def worker_prefetch_lowered(worker: Any, to: int = 1) -> bool:
    """Lower Celery's default prefetch to `to` (the allowed value) on a starting worker
    (before its consumer exists); True when it did. Any other value is left for the check."""
    if getattr(worker, "prefetch_multiplier", None) != CELERY_DEFAULT_PREFETCH:
        return False
    worker.prefetch_multiplier = to
    return True


def worker_delivery(worker: Any) -> WorkerDelivery | None:
    """The delivery settings of a starting worker, or None when it consumes no jobs queue."""
    from outbox.transport import broker_url

    app = worker.app
    consumed = set(app.amqp.queues.consume_from or app.amqp.queues) & jobs_queues()
    if not consumed:
        return None
    single = single_job_queues(consumed)
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
        prefetch_allowed=1 if single else int(jobs_settings.BATCH_PREFETCH_MULTIPLIER),
        single_job_queues=single,
    )
