"""Delete finished jobs past retention now (the beat task does this every JOBS_PRUNE_INTERVAL)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.conf import jobs_settings
from jobs.retention import jobs_prune


class Command(BaseCommand):
    help = (
        "Delete succeeded, failed and cancelled jobs finished more than --older-than seconds "
        "ago (default JOBS_RETENTION_SECONDS), with their events, ledger entries and "
        "callbacks, in batches; jobs something still refers to are kept."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=float, default=None, metavar="SECONDS")
        parser.add_argument("--batch", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        seconds = options["older_than"]
        if seconds is None:
            seconds = jobs_settings.RETENTION_SECONDS
            if seconds <= 0:
                self.stdout.write("JOBS_RETENTION_SECONDS is 0: every job is kept")
                return
        if seconds <= 0:
            raise CommandError("--older-than must be a positive number of seconds")
        if options["batch"] is not None and options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        result = jobs_prune(
            older_than=timedelta(seconds=seconds), batch=options["batch"], budget_seconds=None
        )
        self.stdout.write(f"deleted={result.deleted} kept={result.kept} batches={result.batches}")
