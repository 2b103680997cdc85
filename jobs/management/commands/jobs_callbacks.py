"""Send the due completion callbacks once, or keep doing it (`--loop`) beside beat."""

from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from jobs.callbacks.delivery import callbacks_send_due
from jobs.conf import jobs_settings


class Command(BaseCommand):
    help = "Send due completion callbacks (what the beat task jobs.maintenance.callbacks does)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="run until SIGTERM/SIGINT")
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="idle sleep (default JOBS_CALLBACK_INTERVAL)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"] or float(jobs_settings.CALLBACK_INTERVAL)
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while True:
            try:
                report = callbacks_send_due()
            except Exception as exc:  # database down: say so, wait, try again
                if not options["loop"]:
                    raise
                self.stderr.write(f"callbacks error: {type(exc).__name__}: {exc}")
                close_old_connections()
                time.sleep(interval)
                continue
            if report.claimed or not options["loop"]:
                fields = " ".join(f"{k}={v}" for k, v in report.as_dict().items())
                self.stdout.write(fields)
            if not options["loop"] or stopping:
                return
            if report.claimed == 0:
                time.sleep(interval)
