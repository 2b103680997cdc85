"""Periodic schedules, the database part: definitions synced to rows, the ticker, and the
operator's pause and resume (jobs.ticks is the pure part: cron ticks and catch-up policy).

Definitions live in code (`@handler(schedule=...)`, named after the kind) and in
JOBS_SCHEDULES; a row keeps each one's cursor, counts and pause state. The ticker syncs the
definitions its process knows and ticks only those: a schedule removed from code stops being
ticked once no running process defines it, and keeps its row and audit trail (its `seen_at`
says when a process last defined it).

`schedules_tick` (beat's `jobs.maintenance.schedules`, every JOBS_SCHEDULE_INTERVAL), for each
due schedule in its own transaction:

1. Lock the row (FOR UPDATE SKIP LOCKED): a ticker that finds it locked passes it by, since
   the holder is deciding the same ticks. A crash here leaves nothing.
2. Take the ticks in (decided_through, now] and apply the catch-up policy (jobs.ticks).
3. Submit each tick's job to run: business key `schedule:<name>@<tick UTC>`, the schedule's
   input, owned by JOBS_SCHEDULE_OWNER, its outbox row in the same transaction. A crash here
   (failpoint `schedule.after_submit_before_advance`) rolls the jobs back with the cursor:
   the next run decides the same ticks again.
4. Move the cursor with a write guarded on its old value (ScheduleCursorMoved on zero rows:
   everything of step 3 rolls back), with the counts of submitted and missed ticks.
5. Commit: the tick's jobs and the cursor together. Should a tick's job exist already (the
   cursor was moved back by hand), (owner, kind, business key, input version) is unique in
   the database: the submit returns that job again instead of a second one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from outbox.failpoints import failpoint

from . import registry
from .conf import jobs_settings
from .exceptions import IdempotencyConflict, ScheduleCursorMoved, ScheduleStateConflict
from .models import Job, Schedule, ScheduleAction, ScheduleEvent, ScheduleSource
from .submission import job_submit
from .ticks import (
    CATCH_UP_SECONDS,
    CatchUp,
    ScheduleInvalid,
    ScheduleSpec,
    catch_up_check,
    tick_business_key,
    tick_next,
    tick_plan,
    ticks_between,
)

logger = logging.getLogger(__name__)

AFTER_SUBMIT = "schedule.after_submit_before_advance"  # declared in jobs.failpoints

SETTING_KEYS = {"kind", "cron", "timezone", "catch_up", "catch_up_seconds", "input"}
# A row whose process last defined it longer ago than this many ticker intervals (at least
# a minute) is shown as "not defined": no running ticker knows it.
SEEN_INTERVALS = 10
# How often a ticker stamps `seen_at` of rows it defines and that did not change.
SEEN_REFRESH = timedelta(seconds=30)
# Resume counts the ticks the pause skipped up to this many (for its audit note).
SKIPPED_COUNT_MAX = 100_000


def schedule_from_setting(name: str, raw: object) -> ScheduleSpec:
    """One JOBS_SCHEDULES entry as a definition; ScheduleInvalid says what is wrong."""
    if not isinstance(raw, dict):
        raise ScheduleInvalid(f"JOBS_SCHEDULES[{name!r}] must be a dict, not {raw!r}")
    unknown = sorted(set(raw) - SETTING_KEYS)
    if unknown:
        raise ScheduleInvalid(
            f"JOBS_SCHEDULES[{name!r}] has unknown keys {unknown} (known: {sorted(SETTING_KEYS)})"
        )
    missing = [key for key in ("kind", "cron") if not raw.get(key)]
    if missing:
        raise ScheduleInvalid(f"JOBS_SCHEDULES[{name!r}] needs {' and '.join(missing)}")
    return ScheduleSpec(
        name=name,
        kind=str(raw["kind"]),
        cron=raw["cron"],
        timezone=raw.get("timezone", "UTC"),
        catch_up=catch_up_check(raw.get("catch_up", CatchUp.SKIP_OLDER)),
        catch_up_seconds=raw.get("catch_up_seconds", CATCH_UP_SECONDS),
        input=raw.get("input", {}),
        source=ScheduleSource.SETTINGS,
    )


def schedule_definitions() -> dict[str, ScheduleSpec]:
    """Every schedule this process defines: its kinds' and JOBS_SCHEDULES' (by name)."""
    found = {spec.name: spec for spec in registry.schedules()}
    for name, raw in jobs_settings.SCHEDULES.items():
        try:
            found[name] = schedule_from_setting(name, raw)
        except ScheduleInvalid:
            # The system check (jobs.E031) names it; the other schedules still tick.
            logger.exception("JOBS_SCHEDULES[%r] is not valid; it does not tick", name)
    return found


def schedule_owner() -> User:
    """The user that owns scheduled jobs (JOBS_SCHEDULE_OWNER), created on first use with no
    usable password and no staff rights."""
    model = get_user_model()
    owner, created = model.objects.get_or_create(username=jobs_settings.SCHEDULE_OWNER)
    if created:
        owner.set_unusable_password()
        owner.save(update_fields=["password"])
    return owner


def _definition(spec: ScheduleSpec) -> dict[str, Any]:
    return {
        "kind": spec.kind,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "catch_up": spec.catch_up.value,
        "catch_up_seconds": spec.catch_up_seconds,
        "input": spec.input,
        "source": spec.source,
    }


DEFINITION_FIELDS = ("kind", "cron", "timezone", "catch_up", "catch_up_seconds", "input", "source")


def _row_definition(row: Schedule) -> dict[str, Any]:
    return {name: getattr(row, name) for name in DEFINITION_FIELDS}


def _event(
    row: Schedule, action: ScheduleAction, *, actor: str = "", note: str = "", **details: Any
) -> None:
    ScheduleEvent.objects.create(
        schedule=row, action=action, actor=actor, note=note, details=details
    )


def schedules_sync(definitions: dict[str, ScheduleSpec], *, now: datetime) -> None:
    """Create rows for new definitions (their first tick is the first after now), write
    changed definitions (the cursor and pause stay), stamp `seen_at`. Never deletes."""
    rows = {row.name: row for row in Schedule.objects.filter(name__in=list(definitions))}
    for name, spec in definitions.items():
        row = rows.get(name)
        if row is None:
            _schedule_create(spec, now=now)
        elif _row_definition(row) != _definition(spec):
            _schedule_redefine(row, spec, now=now)
        elif row.seen_at < now - SEEN_REFRESH:
            Schedule.objects.filter(pk=row.pk, seen_at__lt=now).update(seen_at=now)


def _schedule_create(spec: ScheduleSpec, *, now: datetime) -> None:
    with transaction.atomic():
        row, created = Schedule.objects.get_or_create(
            name=spec.name,
            defaults={
                **_definition(spec),
                "decided_through": now,
                "next_tick": spec.next_tick(now),
                "seen_at": now,
            },
        )
        if created:
            # The first cursor: its ticks are those after it (what checks count from).
            _event(row, ScheduleAction.CREATED, **_definition(spec), after=now.isoformat())


def _schedule_redefine(row: Schedule, spec: ScheduleSpec, *, now: datetime) -> None:
    """A definition changed in code: the next tick follows the new one from the cursor on.
    Guarded on the old definition, so of two tickers syncing it one records the change, and
    on the cursor (a ticker that moved it meanwhile: the next sync writes the change)."""
    old = _row_definition(row)
    new = _definition(spec)
    with transaction.atomic():
        guard = Schedule.objects.filter(pk=row.pk, decided_through=row.decided_through, **old)
        changed = guard.update(
            **new, next_tick=spec.next_tick(row.decided_through), seen_at=now, updated_at=now
        )
        if changed:
            before = {k: v for k, v in old.items() if new[k] != v}
            _event(row, ScheduleAction.CHANGED, before=before, after={k: new[k] for k in before})


@dataclass
class TickReport:
    """What one ticker run did, by schedule name: ticks submitted and missed."""

    submitted: dict[str, int] = field(default_factory=dict)
    missed: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"submitted": self.submitted, "missed": self.missed, "failed": self.failed}


def database_now() -> datetime:
    """PostgreSQL's clock: the tick horizon of every ticker, so tickers on hosts whose clocks
    disagree never submit a tick before its time by the database's, nor judge lateness apart."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    now: datetime = row[0]
    return now


def schedules_tick(*, now: datetime | None = None) -> TickReport:
    """One ticker run: sync this process's definitions, then advance each due schedule
    (module docstring). `now` is the tick horizon: the database's clock (tests pass one)."""
    definitions = {
        name: spec
        for name, spec in schedule_definitions().items()
        if registry.kind_latest_or_none(spec.kind) is not None  # another app's worker runs it
    }
    if not definitions:
        return TickReport()  # nothing to sync or tick: no query at all
    now = now or database_now()
    schedules_sync(definitions, now=now)
    due = Schedule.objects.filter(
        name__in=list(definitions), paused=False, next_tick__lte=now
    ).values_list("pk", "name")
    report = TickReport()
    for pk, name in due:
        try:
            advanced = schedule_advance(pk, definitions[name], now=now)
        except Exception:
            # One schedule's bad input or an unknown kind must not stop the others; its
            # cursor stays, and the next run tries again.
            logger.exception("schedule %s: tick failed; its cursor stays", name)
            report.failed.append(name)
            continue
        if advanced is not None:
            report.submitted[name], report.missed[name] = advanced
    return report


def schedule_advance(pk: int, spec: ScheduleSpec, *, now: datetime) -> tuple[int, int] | None:
    """Decide the due ticks of one schedule (steps 1-5 of the module docstring): (submitted,
    missed), or None when another ticker holds it or nothing is due any more."""
    with transaction.atomic():
        row = (
            Schedule.objects.select_for_update(skip_locked=True)
            .filter(pk=pk, paused=False, next_tick__lte=now)
            .first()
        )
        if row is None:
            return None
        plan = tick_plan(
            spec.ticks_after(row.decided_through, until=now),
            now=now,
            catch_up=spec.catch_up,
            catch_up_seconds=spec.catch_up_seconds,
            decided_through=row.decided_through,
        )
        owner = schedule_owner()
        last_job: UUID | None = None
        for tick in plan.run:
            last_job = _tick_submit(spec, tick, owner=owner)
        failpoint(AFTER_SUBMIT)
        changes: dict[str, Any] = {
            "decided_through": plan.through,
            "next_tick": spec.next_tick(plan.through),
            "submitted_ticks": F("submitted_ticks") + len(plan.run),
            "missed_ticks": F("missed_ticks") + plan.missed,
            "updated_at": timezone.now(),
        }
        if plan.run:
            changes.update(last_tick=plan.run[-1], last_job_id=last_job)
        moved = Schedule.objects.filter(pk=row.pk, decided_through=row.decided_through).update(
            **changes
        )
        if moved != 1:
            raise ScheduleCursorMoved(
                f"schedule {row.name}: cursor {row.decided_through.isoformat()} moved meanwhile"
            )
    if plan.missed:
        logger.warning(
            "schedule %s: %d tick(s) missed (catch_up=%s), through %s",
            spec.name,
            plan.missed,
            spec.catch_up.value,
            plan.through.isoformat(),
        )
    return len(plan.run), plan.missed


def _tick_submit(spec: ScheduleSpec, tick: datetime, *, owner: User) -> UUID:
    """The tick's job: a new one, or the one this tick already has (the database's unique
    logical key), also when the definition's input changed since."""
    key = tick_business_key(spec.name, tick)
    try:
        job = job_submit(kind=spec.kind, input=spec.input, owner=owner, business_key=key)
    except IdempotencyConflict:
        found = Job.objects.filter(
            owner=owner, tenant__isnull=True, kind=spec.kind, business_key=key, input_version=1
        ).values_list("pk", flat=True)
        return found.get()
    if job.replayed:
        logger.info("schedule %s: tick %s had its job already (%s)", spec.name, key, job.pk)
    return job.pk


def _note_required(note: str, verb: str) -> str:
    note = note.strip()
    if not note:
        raise ScheduleStateConflict(f"Write a note saying why before you {verb} a schedule.")
    return note


def schedule_pause(*, schedule_id: int, actor: str, note: str) -> Schedule:
    """Stop ticking a schedule until it is resumed; who, when and why are recorded."""
    note = _note_required(note, "pause")
    now = timezone.now()
    with transaction.atomic():
        row = Schedule.objects.select_for_update().get(pk=schedule_id)
        paused = Schedule.objects.filter(pk=row.pk, paused=False).update(
            paused=True, paused_by=actor, paused_at=now, pause_note=note, updated_at=now
        )
        if not paused:
            raise ScheduleStateConflict(f"Schedule {row.name} is paused already.")
        _event(row, ScheduleAction.PAUSED, actor=actor, note=note)
    row.refresh_from_db()
    return row


def schedule_resume(*, schedule_id: int, actor: str, note: str) -> Schedule:
    """Tick a paused schedule again. The ticks of the pause are skipped, not caught up (an
    operator paused them on purpose): the first tick after the resume is the next to run."""
    note = _note_required(note, "resume")
    now = database_now()
    with transaction.atomic():
        row = Schedule.objects.select_for_update().get(pk=schedule_id)
        if not row.paused:
            raise ScheduleStateConflict(f"Schedule {row.name} is not paused.")
        cursor = max(now, row.decided_through)
        skipped = _ticks_counted(row, after=row.decided_through, until=cursor)
        resumed = Schedule.objects.filter(
            pk=row.pk, paused=True, decided_through=row.decided_through
        ).update(
            paused=False,
            paused_by="",
            paused_at=None,
            pause_note="",
            decided_through=cursor,
            next_tick=tick_next(row.cron, _zone(row), after=cursor),
            updated_at=now,
        )
        if not resumed:
            raise ScheduleCursorMoved(f"schedule {row.name}: changed while resuming")
        _event(
            row,
            ScheduleAction.RESUMED,
            actor=actor,
            note=note,
            skipped_while_paused=skipped,
            paused_by=row.paused_by,
            paused_at=row.paused_at.isoformat() if row.paused_at else None,
        )
    row.refresh_from_db()
    return row


def _zone(row: Schedule) -> ZoneInfo:
    return ZoneInfo(row.timezone)


def _ticks_counted(row: Schedule, *, after: datetime, until: datetime) -> int:
    count = 0
    for _ in ticks_between(row.cron, _zone(row), after=after, until=until):
        count += 1
        if count >= SKIPPED_COUNT_MAX:
            break
    return count


def schedule_defined_recently(row: Schedule, *, now: datetime | None = None) -> bool:
    """Whether a running ticker defined this schedule lately (else it was removed from code,
    or no ticker runs)."""
    now = now or timezone.now()
    horizon = max(
        SEEN_INTERVALS * jobs_settings.SCHEDULE_INTERVAL, 60.0, SEEN_REFRESH.total_seconds() * 2
    )
    return row.seen_at >= now - timedelta(seconds=horizon)
