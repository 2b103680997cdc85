"""Reads for operators: grouped, index-friendly queries shared by metrics, /ops/ and reconcile.

Every query here is either a GROUP BY over an index (`jobs_job_state_kind_idx`) or the first
rows of a partial index (`jobs_job_due_idx`, `jobs_job_lease_expiry_idx`,
`outbox_entry_due_idx`, `jobs_effect_open_idx`), so a scrape stays cheap at a million jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from jobs.counters import PRUNED
from jobs.models import Job, QuarantineRecord, QuarantineStatus
from jobs.plans import in_index_order
from jobs.states import ACTIVE, TERMINAL, JobState

FINISHED_OUTCOMES: tuple[str, ...] = tuple(
    sorted(s.value for s in TERMINAL | {JobState.QUARANTINED})
)


@dataclass
class KindCounts:
    """Accepted vs finished for one kind: the gap is work still in flight."""

    kind: str
    by_state: dict[str, int] = field(default_factory=dict)

    @property
    def accepted(self) -> int:
        return sum(self.by_state.values())

    @property
    def terminal(self) -> int:
        return sum(self.by_state.get(s.value, 0) for s in TERMINAL)

    @property
    def quarantined(self) -> int:
        return self.by_state.get(JobState.QUARANTINED.value, 0)

    @property
    def active(self) -> int:
        return sum(self.by_state.get(s.value, 0) for s in ACTIVE)


def job_counts_by_kind() -> dict[str, KindCounts]:
    """One index-only GROUP BY over (state, kind)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT kind, state, count(*) FROM jobs_job GROUP BY kind, state")
        rows = cursor.fetchall()
    counts: dict[str, KindCounts] = {}
    for kind, state, n in rows:
        counts.setdefault(kind, KindCounts(kind)).by_state[state] = n
    return counts


@dataclass(frozen=True)
class JobTotals:
    """The rows by state now (every state, 0 included), and the finished jobs retention
    deleted by end state, read in one statement (one snapshot: a prune that commits between
    two reads would count its batch twice, or not at all, and the totals would step back)."""

    by_state: dict[str, int]
    pruned: dict[str, int]

    @property
    def accepted(self) -> int:
        return sum(self.by_state.values()) + sum(self.pruned.values())

    def ended(self, state: str) -> int:
        return self.by_state.get(state, 0) + self.pruned.get(state, 0)


_TOTALS_SQL = """
SELECT false, state, count(*) FROM jobs_job GROUP BY state
UNION ALL
SELECT true, label, value FROM jobs_counter WHERE name = %s
"""


def job_totals() -> JobTotals:
    """Counts for the accepted and completed counters: they never go down as history is
    pruned (jobs.retention adds what it deletes to `pruned_total` in its own transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(_TOTALS_SQL, [PRUNED])
        rows = cursor.fetchall()
    by_state = {state.value: 0 for state in JobState}
    by_state.update({state: n for pruned, state, n in rows if not pruned})
    return JobTotals(by_state=by_state, pruned={state: n for pruned, state, n in rows if pruned})


def oldest_due_at() -> datetime | None:
    """When the longest-waiting due job became due (first row of jobs_job_due_idx, in its
    order: jobs.plans; the soak's plans had it walk every active job's entry instead)."""
    with in_index_order(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT next_attempt_at FROM jobs_job "
            "WHERE state IN ('queued', 'retry_wait') AND next_attempt_at <= now() "
            "ORDER BY next_attempt_at LIMIT 1"
        )
        row = cursor.fetchone()
    return row[0] if row else None


def oldest_queued_age_seconds(now: datetime | None = None) -> float:
    due = oldest_due_at()
    if due is None:
        return 0.0
    return max(((now or timezone.now()) - due).total_seconds(), 0.0)


def expired_lease_count(*, older_than: float = 0.0) -> int:
    """Leased rows whose lease ended more than `older_than` seconds ago (database clock), from
    the lease index in its order (jobs.plans: not a walk of every active job's entry)."""
    with in_index_order(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM jobs_job WHERE state = 'leased' "
            "AND lease_until < now() - make_interval(secs => %s) ORDER BY lease_until) AS l",
            [older_than],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def stale_effect_count(*, older_than: float) -> int:
    """Ledger entries still pending/uncertain after `older_than` seconds (jobs_effect_open_idx)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM jobs_effectledgerentry "
            "WHERE state IN ('pending', 'uncertain') "
            "AND updated_at < now() - make_interval(secs => %s)",
            [older_than],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True)
class OutboxLag:
    pending: int
    lag_seconds: float
    failing: int


def outbox_lag() -> OutboxLag:
    """Unpublished due rows: how many, how late the oldest is, how many saw a publish error."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), EXTRACT(EPOCH FROM now() - min(available_at)), "
            "count(*) FILTER (WHERE last_error <> '') "
            "FROM outbox_outboxentry WHERE published_at IS NULL AND available_at <= now()"
        )
        row = cursor.fetchone()
    if not row:
        return OutboxLag(0, 0.0, 0)
    return OutboxLag(int(row[0]), max(float(row[1] or 0.0), 0.0), int(row[2]))


def open_quarantine_count() -> int:
    return QuarantineRecord.objects.filter(status=QuarantineStatus.OPEN).count()


def open_quarantine(limit: int = 20) -> list[QuarantineRecord]:
    return list(
        QuarantineRecord.objects.filter(status=QuarantineStatus.OPEN)
        .order_by("-created_at")
        .only(
            "id", "job_id", "kind", "reason", "category", "attempts", "responsible", "created_at"
        )[:limit]
    )


def running_with_progress(limit: int = 20) -> list[Job]:
    """Leased jobs whose handler reported progress, the latest reports first: a few rows of
    the leased jobs (at most the workers' concurrency), never input or result."""
    return list(
        Job.objects.filter(state=JobState.LEASED.value, progress__isnull=False)
        .order_by("-progress__updated_at")
        .only("id", "kind", "attempt", "started_at", "progress")[:limit]
    )


def latency_quantiles(*, window: float = 300.0) -> dict[str, float]:
    """Accept-to-success latency of jobs finished in the last `window` s (jobs_job_finished_idx)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP "
            "(ORDER BY EXTRACT(EPOCH FROM finished_at - created_at)) "
            "FROM jobs_job WHERE finished_at >= now() - make_interval(secs => %s) "
            "AND state = 'succeeded'",
            [window],
        )
        row = cursor.fetchone()
    if not row or row[0] is None:
        return {}
    return dict(zip(("0.5", "0.95", "0.99"), (float(v) for v in row[0]), strict=True))


QUANTILES = ("0.5", "0.95", "0.99")


def kind_duration_quantiles(*, window: float = 300.0) -> dict[str, dict[str, dict[str, float]]]:
    """Per kind, of the jobs that succeeded in the last `window` s: quantiles of the latency
    (accept to success) and of the run (first start to success, retries included), as
    {"latency" | "run": {kind: {quantile: seconds}}} (jobs_job_finished_idx)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT kind,"
            " percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP"
            " (ORDER BY EXTRACT(EPOCH FROM finished_at - created_at)),"
            " percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP"
            " (ORDER BY EXTRACT(EPOCH FROM finished_at - COALESCE(started_at, created_at)))"
            " FROM jobs_job WHERE finished_at >= now() - make_interval(secs => %s)"
            " AND state = 'succeeded' GROUP BY kind ORDER BY kind",
            [window],
        )
        rows = cursor.fetchall()
    out: dict[str, dict[str, dict[str, float]]] = {"latency": {}, "run": {}}
    for kind, latency, run in rows:
        out["latency"][kind] = dict(zip(QUANTILES, map(float, latency), strict=True))
        out["run"][kind] = dict(zip(QUANTILES, map(float, run), strict=True))
    return out


@dataclass(frozen=True)
class MinuteBucket:
    minute: datetime
    accepted: int
    completed: int


def throughput_last_hour(now: datetime | None = None) -> list[MinuteBucket]:
    """Accepted vs completed per minute over the last hour, oldest first (60 buckets)."""
    end = (now or timezone.now()).replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=60)
    sql = (
        "SELECT date_trunc('minute', {col}) AS m, count(*) FROM jobs_job "
        "WHERE {col} >= %s AND {col} < %s GROUP BY m"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql.format(col="created_at"), [start, end])
        accepted = dict(cursor.fetchall())
        cursor.execute(sql.format(col="finished_at"), [start, end])
        completed = dict(cursor.fetchall())
    buckets = []
    for i in range(60):
        minute = start + timedelta(minutes=i)
        buckets.append(MinuteBucket(minute, accepted.get(minute, 0), completed.get(minute, 0)))
    return buckets
