"""Publish due outbox rows once, or keep doing it (`--loop`) as a daemon."""

from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from outbox.conf import outbox_settings
from outbox.relay import outbox_relay_until_empty


class Command(BaseCommand):
    help = "Relay committed outbox rows to the broker (at least once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="run until SIGTERM/SIGINT")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="idle sleep (default OUTBOX_RELAY_INTERVAL)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"] or outbox_settings.RELAY_INTERVAL
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while True:
            try:
                result = outbox_relay_until_empty(time_budget=max(interval * 5, 5.0))
            except Exception as exc:  # database or broker down: say so, wait, try again
                if not options["loop"]:
                    raise
                self.stderr.write(f"relay error: {type(exc).__name__}: {exc}")
                close_old_connections()
                time.sleep(interval)
                continue
            if result.published or result.failed or not options["loop"]:
                self.stdout.write(f"published={result.published} failed={result.failed}")
            if not options["loop"] or stopping:
                return
            if result.reserved == 0:
                time.sleep(interval)
            if stopping:
                return
