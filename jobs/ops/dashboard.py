"""The data behind /ops/: one snapshot of selectors plus the throughput chart geometry."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone

from jobs.models import QuarantineRecord, WorkerHeartbeat
from jobs.progress import progress_text
from jobs.states import ACTIVE

from . import selectors, table_health
from .callbacks import CallbacksPanel, callbacks_panel
from .schedules import ScheduleRow, schedule_rows
from .workers import workers_live

CHART_WIDTH = 600
CHART_HEIGHT = 120


@dataclass(frozen=True)
class Bar:
    x: float
    completed_x: float
    width: float
    accepted_y: float
    accepted_h: float
    completed_y: float
    completed_h: float
    label: str
    accepted: int
    completed: int


@dataclass(frozen=True)
class Running:
    """A leased job and what its handler last reported."""

    job_id: str
    kind: str
    attempt: int
    progress: str
    updated_at: str


@dataclass
class OpsSnapshot:
    backlog: dict[str, int]
    finished: dict[str, int]
    accepted_total: int
    oldest_queued_age_seconds: float
    expired_leases: int
    open_quarantine_count: int
    open_quarantine: list[QuarantineRecord]
    outbox: selectors.OutboxLag
    workers: list[WorkerHeartbeat]
    running: list[Running]
    accepted_last_hour: int
    completed_last_hour: int
    tables: list[table_health.TableHealth] = field(default_factory=list)
    horizon: table_health.Horizon | None = None
    schedules: list[ScheduleRow] = field(default_factory=list)
    callbacks: CallbacksPanel | None = None
    bars: list[Bar] = field(default_factory=list)
    chart_width: int = CHART_WIDTH
    chart_height: int = CHART_HEIGHT
    chart_max: int = 0


def _bars(buckets: list[selectors.MinuteBucket]) -> tuple[list[Bar], int]:
    """Two thin bars per minute (accepted, completed) scaled to the busiest minute."""
    peak = max([max(b.accepted, b.completed) for b in buckets] + [1])
    slot = CHART_WIDTH / len(buckets)
    half = slot / 2 - 0.5
    bars = []
    for i, bucket in enumerate(buckets):
        ah = CHART_HEIGHT * bucket.accepted / peak
        ch = CHART_HEIGHT * bucket.completed / peak
        bars.append(
            Bar(
                x=round(i * slot, 2),
                completed_x=round(i * slot + half, 2),
                width=round(half, 2),
                accepted_y=round(CHART_HEIGHT - ah, 2),
                accepted_h=round(ah, 2),
                completed_y=round(CHART_HEIGHT - ch, 2),
                completed_h=round(ch, 2),
                label=bucket.minute.strftime("%H:%M"),
                accepted=bucket.accepted,
                completed=bucket.completed,
            )
        )
    return bars, peak


def ops_snapshot() -> OpsSnapshot:
    totals = selectors.job_totals()
    by_state = totals.by_state
    buckets = selectors.throughput_last_hour(timezone.now())
    bars, peak = _bars(buckets)
    active = {s.value for s in ACTIVE}
    return OpsSnapshot(
        backlog={s: n for s, n in sorted(by_state.items()) if s in active},
        finished={s: n for s, n in sorted(by_state.items()) if s not in active},
        accepted_total=totals.accepted,  # with the jobs retention deleted, as /metrics
        oldest_queued_age_seconds=selectors.oldest_queued_age_seconds(),
        expired_leases=selectors.expired_lease_count(),
        open_quarantine_count=selectors.open_quarantine_count(),
        open_quarantine=selectors.open_quarantine(limit=20),
        outbox=selectors.outbox_lag(),
        workers=list(workers_live()),
        running=[
            Running(
                job_id=str(job.pk),
                kind=job.kind,
                attempt=job.attempt,
                progress=progress_text(job.progress),
                updated_at=str((job.progress or {}).get("updated_at", "")),
            )
            for job in selectors.running_with_progress(limit=20)
        ],
        accepted_last_hour=sum(b.accepted for b in buckets),
        completed_last_hour=sum(b.completed for b in buckets),
        tables=table_health.table_health(),
        horizon=table_health.horizon(),
        schedules=schedule_rows(),
        callbacks=callbacks_panel(),
        bars=bars,
        chart_max=peak,
    )
