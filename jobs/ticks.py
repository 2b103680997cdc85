"""Periodic schedules, the pure part: a schedule's definition, its cron ticks, and which of
the ticks a late ticker still runs (the catch-up policy). No database, no clock of its own.

Ticks come from cronsim (Debian cron's rules, as healthchecks.io uses them): in a schedule's
timezone, a daily time that a spring-forward day skips (02:30 Europe/Berlin) fires once, at
the first minute after the gap (03:00); one that a fall-back day repeats fires once, on its
first occurrence. Schedules of `*` hours or with a seconds field tick by the clock instead
(every occurrence, both hours of a fall-back day). A tick is an instant: it is stored, keyed
and compared in UTC.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

NAME_MAX_LENGTH = 100
# A ticker that decides more ticks than this for one schedule in one run leaves the rest to
# its next run (a schedule of `catch_up="all"` that was down for long catches up in steps).
TICKS_PER_RUN = 100
# Ticks the "skip_older" policy still runs by default: Procrastinate's 10 minutes.
CATCH_UP_SECONDS = 600


class CatchUp(enum.StrEnum):
    """What a ticker that finds several ticks due at once (it was down, or slow) runs."""

    # Run every tick no older than `catch_up_seconds`; older ones are missed.
    SKIP_OLDER = "skip_older"
    # Run the newest due tick only; the older ones are missed.
    LATEST = "latest"
    # Run every tick, however late (in steps of TICKS_PER_RUN).
    ALL = "all"


class ScheduleInvalid(ValueError):
    """A schedule definition that cannot tick: bad cron, unknown timezone, bad policy."""


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule's definition, from `@handler(schedule=...)` or JOBS_SCHEDULES."""

    name: str
    kind: str
    cron: str
    timezone: str = "UTC"
    catch_up: CatchUp = CatchUp.SKIP_OLDER
    catch_up_seconds: int = CATCH_UP_SECONDS
    input: dict[str, Any] = field(default_factory=dict)
    source: str = "code"  # "code" (@handler) or "settings" (JOBS_SCHEDULES)

    def __post_init__(self) -> None:
        object.__setattr__(self, "catch_up", catch_up_check(self.catch_up))
        problem = spec_problem(self)
        if problem:
            raise ScheduleInvalid(f"schedule {self.name!r}: {problem}")

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def ticks_after(self, after: datetime, *, until: datetime) -> Iterator[datetime]:
        return ticks_between(self.cron, self.zone, after=after, until=until)

    def next_tick(self, after: datetime) -> datetime | None:
        return tick_next(self.cron, self.zone, after=after)


def catch_up_check(value: object) -> CatchUp:
    if isinstance(value, str) and value in {p.value for p in CatchUp}:
        return CatchUp(value)
    known = ", ".join(repr(p.value) for p in CatchUp)
    raise ScheduleInvalid(f"catch_up must be one of {known}, not {value!r}")


def spec_problem(spec: ScheduleSpec) -> str | None:
    """Why a definition cannot tick, or None."""
    if not spec.name or len(spec.name) > NAME_MAX_LENGTH:
        return f"a name is 1 to {NAME_MAX_LENGTH} characters"
    if "@" in spec.name:
        return "a name may not contain '@' (it separates the name from the tick in job keys)"
    if not isinstance(spec.input, dict):
        return f"input must be a JSON object, not {type(spec.input).__name__}"
    try:
        json.dumps(spec.input)
    except (TypeError, ValueError) as exc:
        return f"input is not JSON: {exc}"
    if isinstance(spec.catch_up_seconds, bool) or not isinstance(spec.catch_up_seconds, int):
        return "catch_up_seconds must be a whole number of seconds"
    if spec.catch_up_seconds < 0:
        return "catch_up_seconds must be at least 0"
    return cron_problem(spec.cron, spec.timezone)


def cron_problem(cron: object, timezone: object) -> str | None:
    """Why a cron expression in a timezone cannot tick, or None."""
    if not isinstance(timezone, str) or not timezone:
        return "timezone must be an IANA name such as 'Europe/Berlin'"
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown timezone {timezone!r}"
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        return (
            f"cron must be 5 fields (minute hour day month weekday) or 6 with seconds first, "
            f"not {cron!r}"
        )
    try:
        first = tick_next(cron, zone, after=datetime.now(UTC))
    except (CronSimError, ValueError) as exc:
        return f"cron {cron!r} is not valid: {exc}"
    if first is None:
        return f"cron {cron!r} never ticks"
    return None


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("ticks are computed from aware datetimes")
    return moment.astimezone(UTC)


def ticks_between(
    cron: str, zone: ZoneInfo, *, after: datetime, until: datetime
) -> Iterator[datetime]:
    """The ticks t (in UTC) with after < t <= until, in order, each once.

    cronsim walks local wall time for Debian-style schedules: started inside a repeated
    fall-back hour it can answer an instant earlier than `after`, so anything not later than
    the previous answer is passed over (each instant is one tick, never two)."""
    after, until = _utc(after), _utc(until)
    previous = after
    try:
        for local in CronSim(cron, after.astimezone(zone)):
            tick = local.astimezone(UTC)
            if tick <= previous:
                continue
            if tick > until:
                return
            previous = tick
            yield tick
    except StopIteration:  # cronsim gives up after 50 years without a match
        return


def tick_next(cron: str, zone: ZoneInfo, *, after: datetime) -> datetime | None:
    """The first tick after `after` (UTC), or None when the expression never ticks again."""
    return next(
        ticks_between(cron, zone, after=after, until=datetime.max.replace(tzinfo=UTC)), None
    )


@dataclass(frozen=True)
class TickPlan:
    """What one ticker run decides for one schedule: the ticks it submits, how many it misses
    (the policy skipped them), and how far its decision reaches."""

    run: list[datetime]
    missed: int
    through: datetime  # every tick up to here is decided (run or missed)


def tick_plan(
    ticks: Iterable[datetime],
    *,
    now: datetime,
    catch_up: CatchUp,
    catch_up_seconds: int = CATCH_UP_SECONDS,
    decided_through: datetime,
    limit: int = TICKS_PER_RUN,
) -> TickPlan:
    """Apply the catch-up policy to the due ticks (in order, all <= now) of one schedule.

    The ticks are read once, as a stream: a long outage of a frequent schedule is counted,
    not held in memory. Under ALL at most `limit` ticks are taken; the plan then reaches only
    as far as the last of them, and the next run goes on from there."""
    run: list[datetime] = []
    missed = 0
    through = decided_through
    oldest = now - timedelta(seconds=catch_up_seconds)
    for tick in ticks:
        if catch_up is CatchUp.ALL and len(run) >= limit:
            break
        through = tick
        if catch_up is CatchUp.LATEST:
            missed += len(run)
            run = [tick]
        elif catch_up is CatchUp.SKIP_OLDER and tick < oldest:
            missed += 1
        else:
            run.append(tick)
    return TickPlan(run=run, missed=missed, through=through)


def tick_business_key(name: str, tick: datetime) -> str:
    """The business key of a tick's job: the schedule's name and the tick's instant in UTC.

    (kind, business key, input version 1) is unique per owner in the database, so a tick is
    accepted once however many tickers race for it."""
    return f"schedule:{name}@{_utc(tick).strftime('%Y-%m-%dT%H:%M:%SZ')}"
