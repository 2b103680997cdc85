"""Periodic schedules from the shell: list them (state, last and next tick, submitted and
missed), pause or resume one with a note (the admin's actions, through the same services)."""

from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import scheduler
from jobs.exceptions import JobError
from jobs.models import Schedule
from jobs.ops.schedules import schedule_rows


class Command(BaseCommand):
    help = "List periodic schedules; --pause NAME or --resume NAME with --note WHY."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="the list as JSON")
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--pause", metavar="NAME", help="stop ticking this schedule")
        action.add_argument("--resume", metavar="NAME", help="tick it again from now")
        parser.add_argument("--note", default="", help="why (required to pause or resume)")
        parser.add_argument(
            "--actor", default="", help="who decides (default: the shell user, 'shell:<user>')"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["pause"] or options["resume"]
        if name:
            self._decide(name, pause=bool(options["pause"]), options=options)
        rows = schedule_rows(limit=10_000)
        if options["json"]:
            self.stdout.write(json.dumps([row.__dict__ for row in rows], default=str, indent=2))
            return
        if not rows:
            self.stdout.write("no periodic schedule (@handler(schedule=...), JOBS_SCHEDULES)")
        for row in rows:
            self.stdout.write(
                f"{row.name}  [{row.state}]  {row.cron} ({row.timezone}) catch_up={row.catch_up}"
                f"  last={row.last_tick or '-'}  next={row.next_tick or '-'}"
                f"  submitted={row.submitted_ticks} missed={row.missed_ticks}"
            )

    def _decide(self, name: str, *, pause: bool, options: dict[str, Any]) -> None:
        row = Schedule.objects.filter(name=name).first()
        if row is None:
            raise CommandError(f"no schedule named {name!r} (see `manage.py jobs_schedules`)")
        actor = options["actor"] or f"shell:{getpass.getuser()}"
        service = scheduler.schedule_pause if pause else scheduler.schedule_resume
        try:
            service(schedule_id=row.pk, actor=actor, note=options["note"])
        except JobError as exc:  # no note, paused already, not paused
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{'paused' if pause else 'resumed'} {name}")
