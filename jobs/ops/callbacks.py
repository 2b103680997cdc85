"""Completion callbacks as operators see them on /ops/ and in /metrics: deliveries by outcome,
what is pending and for how long, the last failures (read from the rows)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jobs.callbacks.selectors import (
    CallbackCounts,
    callback_counts,
    failed_deliveries,
    pending_deliveries,
)
from jobs.models import CallbackDelivery


def callback_metrics(prefix: str) -> Iterator[Metric]:
    counts = callback_counts()
    finished = CounterMetricFamily(
        prefix + "callback_deliveries",
        "Completion callbacks that ended, by outcome (delivered: a 2xx; failed: given up).",
        labels=["outcome"],
    )
    for outcome in ("delivered", "failed"):
        finished.add_metric([outcome], counts.by_status.get(outcome, 0))
    yield finished
    yield GaugeMetricFamily(
        prefix + "callback_pending",
        "Completion callbacks not delivered yet (due, backing off or being sent).",
        value=counts.pending,
    )
    yield GaugeMetricFamily(
        prefix + "callback_oldest_pending_age_seconds",
        "How long ago the job of the oldest pending callback ended.",
        value=counts.oldest_pending_age_seconds,
    )


@dataclass(frozen=True)
class CallbacksPanel:
    """/ops/'s callbacks section: counts, the longest-waiting pending, the last failures."""

    counts: CallbackCounts
    pending: list[CallbackDelivery]
    failed: list[CallbackDelivery]


def callbacks_panel(*, limit: int = 20) -> CallbacksPanel:
    return CallbacksPanel(
        callback_counts(),
        pending_deliveries(limit=limit),
        failed_deliveries(limit=limit),
    )
