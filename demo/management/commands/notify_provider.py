"""Run the local notification provider (see demo.notify_provider)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from demo.notify_provider import provider_server


class Command(BaseCommand):
    help = "Serve a notification provider that records every request and dedupes by key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8765)
        parser.add_argument("--work-seconds", type=float, default=0.0)

    def handle(self, *args: Any, **options: Any) -> None:
        server = provider_server(
            options["host"], options["port"], work_seconds=options["work_seconds"]
        )
        self.stdout.write(
            f"notification provider on http://{options['host']}:{options['port']}/notify"
        )
        self.stdout.flush()
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
