"""Redelivery: a published job nobody claimed within its delivery deadline is published again.

The broker can lose a message it accepted (a consumer SIGKILLed with its BRPOP pending, a
restart without persistence, a flush). The reconciler finds such work after minutes; this
check finds it after a deadline derived from the backlog, every JOBS_REDELIVER_INTERVAL.

The deadline rule (docs/architecture.md, "Delivery deadline"):
  - drain time W = due backlog / completions per second over the last minute, sampled every
    run (`DrainSample`); W is infinite when workers are busy and nothing completed;
  - a message published at p gets D = clamp(MIN, FACTOR x the largest W sampled since p, MAX),
    doubled for each time the check already republished the job in this due period (capped
    at MAX); history that does not reach back to p counts as infinite (MAX);
  - an idle system (no lease running, nothing finished within MIN) has D = MIN for every job:
    due work that nobody is working on is lost, whatever the history says;
  - no live worker: nothing is republished (nobody would take it).
A message waiting behind an honest FIFO backlog is claimed within W(p) of its publish, so
FACTOR x W(p) is a margin, not a guess; the largest W since p keeps the deadline from
shrinking at the tail of a drain, when the backlog is small but its messages are old.

Protocol of `redeliver_run` (one transaction):
  1. Take a transaction-scoped advisory lock (try: a second beat's run returns at once).
  2. Measure the drain, insert its sample, prune samples older than MAX.
  3. Find due jobs whose newest outbox row was published more than D ago (oldest first, at
     most a bounded scan), the claim's rules applied (head of key, caps); lock them
     (SKIP LOCKED) and keep those whose newest row is still the one we judged.
  4. Insert an outbox row per job (jobs.dispatch.job_republish, fast path) and a
     JobEvent; commit. A crash before the commit changes nothing; after it, the rows are
     published right away, or by the relay if this process dies first.
A duplicate message is absorbed by the claim (invariant 5): redelivery only costs a message.
"""

from __future__ import annotations

import bisect
import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.db.models.functions import Now

from jobs.conf import jobs_settings
from jobs.counters import REDELIVERED, counter_increment
from jobs.dispatch import job_republish
from jobs.models import DrainSample, Job
from jobs.plans import in_index_order, in_states
from jobs.selectors import db_now
from jobs.states import CLAIMABLE, JobState
from outbox.floors import MinFloor
from outbox.models import OutboxEntry
from outbox.services import outbox_publish_together

from .reconcile import blocked_by_caps, earlier_in_key
from .workers import workers_live

logger = logging.getLogger(__name__)

REDELIVERER = "redeliverer"
LOCK_KEY = "jobs.redeliver"
RATE_WINDOW_SECONDS = 60.0
# The rate is measured from at most this many completions (the newest), so the check costs
# the same at 100 and at 10,000 completions per second.
RATE_SAMPLE_MOST = 5000
# A row's available_at is its job's next_attempt_at (retries) or its own creation time
# (submit, hand-over, redelivery); this much earlier still counts as the same due period.
PERIOD_SLACK = timedelta(seconds=1)
_CLAIMABLE = [s.value for s in CLAIMABLE]


@dataclass(frozen=True)
class DeadlineRule:
    """The settings of the delivery deadline (module docstring)."""

    minimum: float
    factor: float
    maximum: float

    @classmethod
    def from_settings(cls) -> DeadlineRule:
        return cls(
            minimum=float(jobs_settings.DELIVERY_DEADLINE_MIN),
            factor=float(jobs_settings.DELIVERY_DEADLINE_FACTOR),
            maximum=float(jobs_settings.DELIVERY_DEADLINE_MAX),
        )


@dataclass(frozen=True)
class Drain:
    """What the check measured: due backlog, completions per second, and whether workers are
    busy (a job leased, or one finished within the rule's minimum)."""

    backlog: int
    rate: float
    busy: bool

    @property
    def wait(self) -> float:
        """Seconds the backlog needs at the measured rate (`drain_wait`)."""
        return drain_wait(backlog=self.backlog, rate=self.rate, busy=self.busy)


def drain_wait(*, backlog: int, rate: float, busy: bool) -> float:
    """Seconds a FIFO backlog needs at `rate`; infinite when busy workers complete nothing."""
    if backlog <= 0:
        return 0.0
    if rate > 0:
        return backlog / rate
    return math.inf if busy else 0.0


def delivery_deadline(*, wait: float, republished: int, rule: DeadlineRule) -> float:
    """Seconds after its publish a message counts as lost (module docstring)."""
    base = min(rule.maximum, max(rule.minimum, rule.factor * wait))
    return min(rule.maximum, base * 2.0 ** min(republished, 32))


class DrainHistory:
    """The drain times sampled by earlier runs, sorted, with suffix maxima: `wait_since` is
    a binary search, so judging a window of thousands of jobs costs no more than reading it."""

    def __init__(self, samples: list[tuple[datetime, float]]) -> None:
        self.times = [at for at, _ in samples]
        self.suffix_max = [0.0] * len(samples)
        largest = -math.inf
        for index in range(len(samples) - 1, -1, -1):
            largest = max(largest, samples[index][1])
            self.suffix_max[index] = largest

    def wait_since(self, published_at: datetime, *, slack: float) -> float:
        """The largest drain time sampled since `published_at` (from `slack` before it);
        infinite when no sample was taken within `slack` of it (unknown history)."""
        margin = timedelta(seconds=slack)
        start = bisect.bisect_left(self.times, published_at - margin)
        if start == len(self.times) or self.times[start] > published_at + margin:
            return math.inf
        return self.suffix_max[start]


@dataclass
class RedeliverResult:
    ran: bool = True
    backlog: int = 0
    rate: float = 0.0
    wait: float = 0.0
    examined: int = 0
    redelivered: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        wait = self.wait if math.isfinite(self.wait) else None
        return {
            "ran": self.ran,
            "backlog": self.backlog,
            "rate": round(self.rate, 3),
            "wait": None if wait is None else round(wait, 3),
            "examined": self.examined,
            "redelivered": len(self.redelivered),
        }


def _locked() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [LOCK_KEY])
        got: bool = cursor.fetchone()[0]
    return got


def _completion_rate(now: datetime) -> float:
    """Completions per second over the last minute, from at most RATE_SAMPLE_MOST rows."""
    recent = Job.objects.filter(finished_at__gte=now - timedelta(seconds=RATE_WINDOW_SECONDS))
    oldest_counted = (
        recent.order_by("-finished_at")
        .values_list("finished_at", flat=True)[RATE_SAMPLE_MOST - 1 : RATE_SAMPLE_MOST]
        .first()
    )
    if oldest_counted is not None:
        return RATE_SAMPLE_MOST / max((now - oldest_counted).total_seconds(), 1e-3)
    return recent.count() / RATE_WINDOW_SECONDS


# Where the check's walks of the due index start (outbox.floors): the oldest claimable job
# (those not due yet included: they become due). Under a held xmin horizon, without it, every
# run walks every job claimed since the horizon was held, twice.
due_floor = MinFloor(lambda: Job.objects.filter(state__in=_CLAIMABLE), "next_attempt_at")


def drain_measure(now: datetime, rule: DeadlineRule, *, floor: datetime | None = None) -> Drain:
    """Backlog, rate and busyness from the partial indexes; the backlog is counted only as
    far as can change the deadline (`rate x MAX / FACTOR` rows), so a big one costs no more,
    and from `floor` (outbox.floors). Busy: a job finished within MIN, or a lease that has
    not ended (newest first: under load the first entries of the lease index are live). Run
    it in jobs.plans.in_index_order(), as redeliver_run does."""
    rate = _completion_rate(now)
    busy = (
        Job.objects.filter(finished_at__gte=now - timedelta(seconds=rule.minimum)).exists()
        # first(), not exists(): exists() drops the ORDER BY, and with it the index's order.
        or Job.objects.filter(state=JobState.LEASED.value, lease_until__gte=now)
        .order_by("-lease_until")
        .values_list("pk", flat=True)
        .first()
        is not None
    )
    enough = math.ceil(rate * rule.maximum / rule.factor) + 1
    due = Job.objects.filter(state__in=_CLAIMABLE, next_attempt_at__lte=now)
    if floor is not None:
        due = due.filter(next_attempt_at__gte=floor)
    # Ordered by the due index's key: in_index_order() then keeps the count on that index.
    backlog = due.order_by("next_attempt_at")[:enough].count()
    return Drain(backlog=backlog, rate=rate, busy=busy)


Cursor = tuple[datetime, UUID]


def _cursor_last() -> Cursor | None:
    """Where the previous run's window ended (None: start from the oldest due job)."""
    last = DrainSample.objects.order_by("-taken_at").first()
    if last is None or last.scan_after_due is None or last.scan_after_id is None:
        return None
    return (last.scan_after_due, last.scan_after_id)


def _samples_keep(
    now: datetime, drain: Drain, cursor: Cursor | None, rule: DeadlineRule
) -> list[tuple[datetime, float]]:
    DrainSample.objects.create(
        taken_at=now,
        backlog=drain.backlog,
        drain_rate=drain.rate,
        wait_seconds=drain.wait,
        scan_after_due=cursor[0] if cursor else None,
        scan_after_id=cursor[1] if cursor else None,
    )
    horizon = now - timedelta(seconds=rule.maximum + 4 * jobs_settings.REDELIVER_INTERVAL)
    DrainSample.objects.filter(taken_at__lt=horizon).delete()
    return list(DrainSample.objects.order_by("taken_at").values_list("taken_at", "wait_seconds"))


def due_window(
    *, due_before: datetime, after: Cursor | None, limit: int, floor: datetime | None = None
) -> tuple[list[UUID], Cursor | None]:
    """The next `limit` due jobs by (next_attempt_at, id) after `after`, from the due index,
    and where the next window starts (None once the end is reached: the next run starts over,
    at `floor`). So each run costs at most `limit` rows however old the backlog, and every
    due job over the floor is looked at within ceil(due / limit) runs."""
    due = Job.objects.filter(state__in=_CLAIMABLE, next_attempt_at__lt=due_before)
    if floor is not None:
        due = due.filter(next_attempt_at__gte=floor)
    if after is not None:
        due = due.filter(
            Q(next_attempt_at__gt=after[0]) | Q(next_attempt_at=after[0], pk__gt=after[1])
        )
    rows = list(due.order_by("next_attempt_at", "pk").values_list("next_attempt_at", "pk")[:limit])
    last_due, last_id = rows[-1] if rows else (None, None)
    cursor = (last_due, last_id) if len(rows) == limit and last_due and last_id else None
    return [pk for _, pk in rows], cursor


def undelivered_candidates(*, job_ids: list[UUID], published_before: datetime) -> list[Job]:
    """Of `job_ids`, those still due whose newest outbox row was published before
    `published_before`, heads of their key only, oldest due first; annotated with that row
    (`entry_id`, `entry_published_at`) and `deliveries`, the rows of this due period."""
    newest = OutboxEntry.objects.filter(job_id=OuterRef("pk")).order_by("-id")
    period = (
        OutboxEntry.objects.filter(
            job_id=OuterRef("pk"), available_at__gte=OuterRef("next_attempt_at") - PERIOD_SLACK
        )
        .order_by()
        .values("job_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    return list(
        in_states(Job.objects.filter(pk__in=job_ids), _CLAIMABLE)
        .annotate(
            entry_id=Subquery(newest.values("id")[:1]),
            entry_published_at=Subquery(newest.values("published_at")[:1]),
            deliveries=Subquery(period),
        )
        .filter(entry_published_at__lt=published_before)
        .exclude(Q(serialization_key__isnull=False) & Exists(earlier_in_key()))
        .only("id", "kind", "kind_version", "tenant_id", "generation", "state", "next_attempt_at")
        .order_by("next_attempt_at")
    )


def _overdue(
    jobs: list[Job],
    *,
    now: datetime,
    drain: Drain,
    samples: list[tuple[datetime, float]],
    rule: DeadlineRule,
) -> list[Job]:
    slack = 2 * float(jobs_settings.REDELIVER_INTERVAL)
    history = DrainHistory(samples)
    overdue = []
    for job in jobs:
        published: datetime = job.entry_published_at  # type: ignore[attr-defined]
        # An idle system (module docstring) ignores the history: nobody is working on it.
        wait = history.wait_since(published, slack=slack) if drain.busy else 0.0
        republished = max((job.deliveries or 1) - 1, 0)  # type: ignore[attr-defined]
        deadline = delivery_deadline(wait=wait, republished=republished, rule=rule)
        if (now - published).total_seconds() > deadline and not blocked_by_caps(job):
            overdue.append(job)
    return overdue


def _republish(jobs: list[Job]) -> list[str]:
    """Step 3's lock and re-check, then step 4 (inside the caller's transaction)."""
    judged = {job.pk: job.entry_id for job in jobs}  # type: ignore[attr-defined]
    newest = OutboxEntry.objects.filter(job_id=OuterRef("pk")).order_by("-id")
    locked = (
        in_states(Job.objects.filter(pk__in=list(judged), next_attempt_at__lte=Now()), _CLAIMABLE)
        .select_for_update(skip_locked=True, of=("self",))
        .annotate(entry_id=Subquery(newest.values("id")[:1]))
    )
    done: list[str] = []
    with outbox_publish_together():
        for job in locked:
            if job.entry_id != judged[job.pk]:
                continue  # a worker or another run sent a message meanwhile
            job_republish(
                job,
                reason="redeliverer: no claim within the delivery deadline; published again",
                actor=REDELIVERER,
                fast_path=True,
            )
            done.append(str(job.pk))
    return done


def redeliver_run(*, rule: DeadlineRule | None = None, batch: int | None = None) -> RedeliverResult:
    """One check (module docstring); safe to run from two beats at once."""
    rule = rule or DeadlineRule.from_settings()
    most = int(jobs_settings.REDELIVER_BATCH) if batch is None else batch
    with transaction.atomic():
        if not _locked():
            return RedeliverResult(ran=False)
        now = db_now()
        with in_index_order():  # the walks from the floor stay on their indexes (jobs.plans)
            floor = due_floor.bound()
            drain = drain_measure(now, rule, floor=floor)
            # No deadline is shorter than this one, so older rows are all the check may need.
            shortest = (
                rule.minimum
                if not drain.busy
                else delivery_deadline(wait=drain.wait, republished=0, rule=rule)
            )
            cutoff = now - timedelta(seconds=shortest)
            window, cursor = due_window(
                due_before=cutoff, after=_cursor_last(), limit=most * 4, floor=floor
            )
        samples = _samples_keep(now, drain, cursor, rule)
        result = RedeliverResult(backlog=drain.backlog, rate=drain.rate, wait=drain.wait)
        if not window or not workers_live().exists():
            return result
        jobs = undelivered_candidates(job_ids=window, published_before=cutoff)
        result.examined = len(jobs)
        overdue = _overdue(jobs, now=now, drain=drain, samples=samples, rule=rule)[:most]
        result.redelivered = _republish(overdue) if overdue else []
    if result.redelivered:
        counter_increment(REDELIVERED, by=len(result.redelivered))
        logger.warning(
            "redeliverer published %d jobs again: no claim within the delivery deadline",
            len(result.redelivered),
            extra={"redelivered": len(result.redelivered), "drain_wait": result.as_dict()["wait"]},
        )
    return result
