"""A management command that does one round of work, or keeps doing rounds (`--loop`) as a
daemon beside beat: `outbox_relay` and `jobs_callbacks` are two.

Between rounds it sleeps `--interval` only when a round found nothing to do; a round that
raises (the database or the broker down) is said on stderr and tried again after the
interval; SIGTERM or SIGINT ends the loop after the round in progress. Without `--loop` a
round's error is raised, so the command exits non-zero.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections


class LoopCommand(BaseCommand):
    what = "round"  # the work's name in error lines ("relay error: ...")

    def default_interval(self) -> float:
        raise NotImplementedError

    def run_round(self, interval: float) -> tuple[bool, str]:
        """One round: (whether it found work, its line). The line is printed after every
        round without --loop, and after the rounds that found work with it."""
        raise NotImplementedError

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="run until SIGTERM/SIGINT")
        parser.add_argument(
            "--interval", type=float, default=None, help="idle sleep (default: the setting)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        interval = options["interval"] or self.default_interval()
        loop = bool(options["loop"])
        stopping = False

        def stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while True:
            try:
                busy, line = self.run_round(interval)
            except Exception as exc:  # database or broker down: say so, wait, try again
                if not loop:
                    raise
                self.stderr.write(f"{self.what} error: {type(exc).__name__}: {exc}")
                close_old_connections()
                time.sleep(interval)
                continue
            if busy or not loop:
                self.stdout.write(line)
            if not loop or stopping:
                return
            if not busy:
                time.sleep(interval)
                # stopped while asleep: no further round
                if stopping:
                    return
