"""Send the due completion callbacks once, or keep doing it (`--loop`) beside beat."""

from __future__ import annotations

from jobs.callbacks.delivery import callbacks_send_due
from jobs.conf import jobs_settings
from outbox.management.loop import LoopCommand


class Command(LoopCommand):
    help = "Send due completion callbacks (what the beat task jobs.maintenance.callbacks does)."
    what = "callbacks"

    def default_interval(self) -> float:
        return float(jobs_settings.CALLBACK_INTERVAL)

    def run_round(self, interval: float) -> tuple[bool, str]:
        report = callbacks_send_due()
        fields = " ".join(f"{k}={v}" for k, v in report.as_dict().items())
        return report.claimed > 0, fields
