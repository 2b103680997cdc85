"""See the guarantee with your own eyes: the seed drills on real worker processes (demo.guided)."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from rich.console import Console

from demo.guided import WHERE_NEXT, DemoFailed, accounting_table, demo_run


class Command(BaseCommand):
    help = (
        "Start a private redis-server, workers, relay and provider; kill, pause and confuse "
        "them (job 84, a paused worker, a malformed payload, a flaky provider); print the "
        "accounting. Exits non-zero when a drill's expectation fails."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--broker-url",
            default=None,
            help="use this broker instead of starting a private redis-server",
        )
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds per wait")
        parser.add_argument("--keep-logs", action="store_true", help="keep the children's logs")

    def handle(self, *args: Any, **options: Any) -> None:
        # Piped (CI, tests): wide lines, so the accounting line stays one greppable line.
        width = None if sys.stdout.isatty() else 120
        console = Console(file=sys.stdout, highlight=False, width=width)
        self._migrate_if_needed(console)
        try:
            report = demo_run(
                console=console,
                broker_url=options["broker_url"],
                timeout=options["timeout"],
                keep_logs=options["keep_logs"],
            )
        except DemoFailed as exc:
            raise CommandError(f"demo could not finish: {exc}") from None
        except KeyboardInterrupt:
            console.print("interrupted: every process the demo started was stopped")
            sys.exit(130)
        if report.accounting is not None:
            console.print()
            console.print(accounting_table(report.accounting))
            console.print(report.accounting.line(), soft_wrap=True)
        console.print()
        console.print(WHERE_NEXT)
        if report.failed:
            names = "; ".join(f"{c.drill}: {c.expectation}" for c in report.failed)
            raise CommandError(f"{len(report.failed)} drill expectation(s) failed: {names}")
        console.print("[bold green]all drill expectations held[/bold green]")

    def _migrate_if_needed(self, console: Console) -> None:
        """A fresh database gets its tables first (what `make setup` would do)."""
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            console.print("applying migrations to a fresh database ...")
            call_command("migrate", interactive=False, verbosity=0)
