"""Prometheus metrics read from the database at scrape time.

Values come from the tables (job counts grouped by state, partial indexes for ages) and from
the counters of jobs.counters and outbox.counters, so every web process reports the same
numbers however many workers wrote them; no multiprocess directory, nothing lost when a
worker dies. Never job input, results or payloads: only counts, ages and kind names.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from jobs import counters
from jobs.states import ACTIVE, JobState
from outbox.counters import RELAY_PUBLISHED, counter_value

from . import selectors
from .callbacks import callback_metrics
from .schedules import schedule_metrics
from .table_health import TableHealthCollector
from .workers import workers_live

PREFIX = "jobs_"

# Rare events no row records: (counter name, help). Counter names end in _total.
EVENT_COUNTERS: tuple[tuple[str, str], ...] = (
    (counters.DUPLICATE_DELIVERIES, "Deliveries of a job that was finished or leased elsewhere."),
    (counters.DUPLICATE_EFFECTS, "External effects applied twice for one key (must stay 0)."),
    (counters.STALE_WRITES_REJECTED, "Fenced writes by an old generation that matched no row."),
    (counters.EFFECTS_REUSED, "Effects whose stored outcome was reused instead of calling again."),
    (counters.EXPIRED_LEASES, "Leases the reaper found expired and recovered."),
    (counters.DEFERRED_DELIVERIES, "Deliveries acknowledged because the job was not runnable yet."),
    (counters.REDELIVERED, "Jobs published again: no claim within the delivery deadline."),
)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    # prometheus-client appends _total itself; pass the base name.
    return CounterMetricFamily(PREFIX + name.removesuffix("_total"), doc, value=value)


class JobsCollector(Collector):
    """Reads the job, outbox, ledger and counter tables on every collect()."""

    def collect(self) -> Iterator[Metric]:
        totals = selectors.job_totals()
        by_state = totals.by_state
        yield _counter("accepted_total", "Jobs accepted (committed).", totals.accepted)
        completed = CounterMetricFamily(
            PREFIX + "completed", "Jobs that reached an end state, by outcome.", labels=["outcome"]
        )
        pruned = CounterMetricFamily(
            PREFIX + "pruned",
            "Finished jobs deleted by retention (JOBS_RETENTION_SECONDS), by outcome.",
            labels=["outcome"],
        )
        for outcome in selectors.FINISHED_OUTCOMES:
            completed.add_metric([outcome], totals.ended(outcome))
            pruned.add_metric([outcome], totals.pruned.get(outcome, 0))
        yield completed
        yield pruned
        backlog = GaugeMetricFamily(
            PREFIX + "backlog", "Jobs not finished, by state.", labels=["status"]
        )
        for state in sorted(s.value for s in ACTIVE):
            backlog.add_metric([state], by_state.get(state, 0))
        yield backlog
        yield GaugeMetricFamily(
            PREFIX + "quarantined",
            "Jobs stopped for an operator decision.",
            value=by_state.get(JobState.QUARANTINED.value, 0),
        )
        yield GaugeMetricFamily(
            PREFIX + "oldest_queued_age_seconds",
            "How long the longest-waiting due job has been due.",
            value=selectors.oldest_queued_age_seconds(),
        )
        yield GaugeMetricFamily(
            PREFIX + "expired_leases_unreaped",
            "Leased jobs whose lease has already ended (the reaper has not run yet).",
            value=selectors.expired_lease_count(),
        )
        yield from self._outbox()
        yield from self._counters()
        yield from self._latency()
        yield GaugeMetricFamily(
            PREFIX + "workers_seen",
            "Workers that wrote a heartbeat within three heartbeat intervals.",
            value=workers_live().count(),
        )
        yield from schedule_metrics(PREFIX)
        yield from callback_metrics(PREFIX)

    def _outbox(self) -> Iterator[Metric]:
        lag = selectors.outbox_lag()
        yield GaugeMetricFamily(
            PREFIX + "outbox_lag_seconds",
            "Age of the oldest due outbox row not yet published.",
            value=lag.lag_seconds,
        )
        yield GaugeMetricFamily(
            PREFIX + "outbox_pending", "Due outbox rows not yet published.", value=lag.pending
        )
        yield GaugeMetricFamily(
            PREFIX + "outbox_failing",
            "Due unpublished outbox rows whose last publish failed.",
            value=lag.failing,
        )
        yield _counter(
            RELAY_PUBLISHED,
            "Outbox rows published to the broker (relay and fast path).",
            counter_value(RELAY_PUBLISHED),
        )

    def _counters(self) -> Iterator[Metric]:
        values = counters.counter_values()
        for name, doc in EVENT_COUNTERS:
            total = sum(v for (n, _label), v in values.items() if n == name)
            yield _counter(name, doc, total)
        incompatible = CounterMetricFamily(
            PREFIX + "incompatible_deployment",
            "Deliveries to a worker that lacked the job's kind version.",
            labels=["kind_version"],
        )
        for (name, label), value in sorted(values.items()):
            if name == counters.INCOMPATIBLE_DEPLOYMENT:
                incompatible.add_metric([label], value)
        yield incompatible

    def _latency(self) -> Iterator[Metric]:
        latency = GaugeMetricFamily(
            PREFIX + "latency_seconds",
            "Accept-to-success latency of jobs finished in the last 5 minutes.",
            labels=["quantile"],
        )
        for quantile, value in selectors.latency_quantiles(window=300.0).items():
            latency.add_metric([quantile], value)
        yield latency
        per_kind = selectors.kind_duration_quantiles(window=300.0)
        for measure, doc in (
            ("latency", "Accept-to-success latency per kind, jobs finished in the last 5 minutes."),
            ("run", "First start to success per kind (retries included), last 5 minutes."),
        ):
            family = GaugeMetricFamily(
                f"{PREFIX}kind_{measure}_seconds", doc, labels=["kind", "quantile"]
            )
            for kind, quantiles in per_kind[measure].items():
                for quantile, value in quantiles.items():
                    family.add_metric([kind, quantile], value)
            yield family


def metrics_registry() -> CollectorRegistry:
    """A registry holding only our collector (no process metrics of one random web process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobsCollector())
    registry.register(TableHealthCollector())
    return registry
