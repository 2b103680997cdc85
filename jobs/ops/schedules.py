"""The schedules as operators see them on /ops/ and in /metrics: last and next tick, paused,
missed ticks (read from the rows, so every web process shows the same)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jobs.models import Schedule
from jobs.scheduler import schedule_defined_recently


@dataclass(frozen=True)
class ScheduleRow:
    pk: int
    name: str
    kind: str
    cron: str
    timezone: str
    catch_up: str
    state: str  # active, paused, not defined
    last_tick: datetime | None
    next_tick: datetime | None
    submitted_ticks: int
    missed_ticks: int
    paused_by: str
    pause_note: str


def schedule_rows(*, limit: int = 100) -> list[ScheduleRow]:
    now = timezone.now()
    rows = []
    for row in Schedule.objects.order_by("name")[:limit]:
        state = "paused" if row.paused else "active"
        if not schedule_defined_recently(row, now=now):
            state = "not defined"
        rows.append(
            ScheduleRow(
                pk=row.pk,
                name=row.name,
                kind=row.kind,
                cron=row.cron,
                timezone=row.timezone,
                catch_up=row.catch_up,
                state=state,
                last_tick=row.last_tick,
                next_tick=None if row.paused else row.next_tick,
                submitted_ticks=row.submitted_ticks,
                missed_ticks=row.missed_ticks,
                paused_by=row.paused_by,
                pause_note=row.pause_note,
            )
        )
    return rows


def schedule_metrics(prefix: str) -> Iterator[Metric]:
    """Per schedule: ticks missed and submitted (counters), last and next tick, paused."""
    missed = CounterMetricFamily(
        prefix + "schedule_missed_ticks",
        "Ticks a schedule's catch-up policy skipped (the ticker was down or late).",
        labels=["schedule"],
    )
    submitted = CounterMetricFamily(
        prefix + "schedule_submitted_ticks",
        "Ticks whose job a schedule submitted (one job per tick).",
        labels=["schedule"],
    )
    last = GaugeMetricFamily(
        prefix + "schedule_last_tick_timestamp_seconds",
        "Unix time of the newest tick a schedule submitted.",
        labels=["schedule"],
    )
    upcoming = GaugeMetricFamily(
        prefix + "schedule_next_tick_timestamp_seconds",
        "Unix time of a schedule's next tick.",
        labels=["schedule"],
    )
    paused = GaugeMetricFamily(
        prefix + "schedule_paused",
        "1 while an operator has paused a schedule.",
        labels=["schedule"],
    )
    for row in Schedule.objects.order_by("name"):
        missed.add_metric([row.name], row.missed_ticks)
        submitted.add_metric([row.name], row.submitted_ticks)
        if row.last_tick is not None:
            last.add_metric([row.name], row.last_tick.timestamp())
        if row.next_tick is not None:
            upcoming.add_metric([row.name], row.next_tick.timestamp())
        paused.add_metric([row.name], 1 if row.paused else 0)
    yield from (missed, submitted, last, upcoming, paused)
