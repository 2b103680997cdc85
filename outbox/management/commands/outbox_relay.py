"""Publish due outbox rows once, or keep doing it (`--loop`) as a daemon."""

from __future__ import annotations

from outbox.conf import outbox_settings
from outbox.management.loop import LoopCommand
from outbox.relay import outbox_relay_until_empty


class Command(LoopCommand):
    help = "Relay committed outbox rows to the broker (at least once)."
    what = "relay"

    def default_interval(self) -> float:
        return float(outbox_settings.RELAY_INTERVAL)

    def run_round(self, interval: float) -> tuple[bool, str]:
        result = outbox_relay_until_empty(time_budget=max(interval * 5, 5.0))
        busy = result.reserved > 0
        return busy, f"published={result.published} failed={result.failed}"
