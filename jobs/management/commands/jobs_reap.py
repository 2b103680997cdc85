"""Recover expired leases now (the beat task does this every JOBS_REAP_INTERVAL)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobs.reaper import jobs_reap


class Command(BaseCommand):
    help = "Move jobs whose lease expired to retry_wait, or quarantine them when out of budget."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=500)

    def handle(self, *args: Any, **options: Any) -> None:
        total = {"expired": 0, "retried": 0, "quarantined": 0}
        while True:
            result = jobs_reap(limit=options["limit"])
            total["expired"] += result.expired
            total["retried"] += result.retried
            total["quarantined"] += result.quarantined
            if result.expired < options["limit"]:
                break
        self.stdout.write(
            f"expired={total['expired']} retried={total['retried']} "
            f"quarantined={total['quarantined']}"
        )
