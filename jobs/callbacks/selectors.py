"""Reads of callback deliveries: a job's (the API, the admin), and counts (metrics, /ops/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Prefetch, QuerySet

from jobs.models import CallbackAttempt, CallbackDelivery, Job

ATTEMPTS_SHOWN = 50  # the newest attempts a job's view lists (the budget is 12 by default)


def with_callback_deliveries(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """Jobs with their deliveries and attempts loaded (a list page: two queries, not 2 per job)."""
    return jobs.prefetch_related(
        Prefetch(
            "callback_deliveries",
            queryset=CallbackDelivery.objects.prefetch_related(
                Prefetch("attempt_log", queryset=CallbackAttempt.objects.order_by("number"))
            ),
        )
    )


def job_callback_view(job: Job) -> dict[str, Any] | None:
    """{url, delivery: {webhook_id, event, status, ..., attempts: [...]}} or None when the job
    has no callback_url (then without a query)."""
    if not job.callback_url:
        return None
    deliveries = list(job.callback_deliveries.all())
    delivery = deliveries[0] if deliveries else None
    return {
        "url": job.callback_url,
        "delivery": None if delivery is None else _delivery_view(delivery),
    }


def _delivery_view(delivery: CallbackDelivery) -> dict[str, Any]:
    attempts = list(delivery.attempt_log.all())[-ATTEMPTS_SHOWN:]
    return {
        "webhook_id": delivery.webhook_id,
        "event": delivery.event,
        "status": delivery.status,
        "next_attempt_at": delivery.next_attempt_at,
        "finished_at": delivery.finished_at,
        "last_error": delivery.last_error,
        "attempts": [
            {
                "number": a.number,
                "started_at": a.started_at,
                "outcome": a.outcome,
                "status_code": a.status_code,
                "error": a.error,
                "duration_ms": a.duration_ms,
            }
            for a in attempts
        ],
    }


@dataclass(frozen=True)
class CallbackCounts:
    pending: int
    oldest_pending_age_seconds: float
    by_status: dict[str, int]


def callback_counts() -> CallbackCounts:
    """Deliveries by status, and how long the oldest pending one has waited since the job
    ended (one GROUP BY; the pending ones from jobs_callbackdelivery_due_idx's rows)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT status, count(*), "
            "coalesce(extract(epoch FROM now() - min(created_at)), 0) "
            "FROM jobs_callbackdelivery GROUP BY status"
        )
        rows = cursor.fetchall()
    by_status = {"pending": 0, "delivered": 0, "failed": 0}
    oldest = 0.0
    for status, count, age in rows:
        by_status[status] = int(count)
        if status == "pending":
            oldest = max(float(age), 0.0)
    return CallbackCounts(by_status["pending"], oldest, by_status)


def failed_deliveries(*, limit: int) -> list[CallbackDelivery]:
    """The most recently failed deliveries (jobs_callbackdelivery_fail_idx)."""
    return list(CallbackDelivery.objects.filter(status="failed").order_by("-finished_at")[:limit])


def pending_deliveries(*, limit: int) -> list[CallbackDelivery]:
    """The longest-waiting pending deliveries."""
    return list(
        CallbackDelivery.objects.filter(status="pending").order_by("next_attempt_at")[:limit]
    )
