"""`manage.py jobs_reconcile [--repair] [--json] [--stale-after SECONDS]`: check the invariants."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.ops.reconcile import ReconcileReport, default_stale_after, reconcile_run

EXIT_BROKEN = 3  # 1 and 2 are Django's and argparse's usage errors


class Command(BaseCommand):
    help = (
        "Compare accepted and finished work, find jobs the broker lost (re-enqueue them with "
        "--repair), expired leases, stale effects and open quarantine. Exits 3 when an "
        "invariant is broken, so cron and monitors can use it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--repair", action="store_true", help="re-enqueue lost work")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--stale-after",
            type=float,
            default=None,
            metavar="SECONDS",
            help=f"how long due work may wait before it counts as lost "
            f"(default JOBS_RECONCILE_STALE_AFTER={default_stale_after():g})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stale_after = options["stale_after"]
        if stale_after is not None and stale_after < 0:
            raise CommandError("--stale-after must be zero or more seconds")
        report = reconcile_run(repair=options["repair"], stale_after=stale_after)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
        else:
            self._print_text(report)
        if not report.ok:
            raise CommandError(
                "invariants broken: " + "; ".join(report.broken), returncode=EXIT_BROKEN
            )

    def _print_text(self, report: ReconcileReport) -> None:
        out = self.stdout.write
        out(f"reconcile at {report.checked_at} (stale after {report.stale_after:g}s)")
        out(f"{'kind':<30} {'accepted':>9} {'terminal':>9} {'quarant.':>9} {'active':>9}")
        for k in report.kinds or ():
            out(f"{k.kind:<30} {k.accepted:>9} {k.terminal:>9} {k.quarantined:>9} {k.active:>9}")
        out(f"oldest queued age: {report.oldest_queued_age_seconds:.1f}s")
        out(f"outbox: {report.outbox_pending} pending, lag {report.outbox_lag_seconds:.1f}s")
        out(f"lost work: {len(report.lost)} found, {len(report.repaired)} re-enqueued")
        for job_id in report.lost[:20]:
            out(f"  lost {job_id}{' (repaired)' if job_id in report.repaired else ''}")
        out(f"expired leases not reaped: {report.expired_leases}")
        out(f"stale pending/uncertain effects: {report.stale_effects}")
        out(f"open quarantine: {report.open_quarantine}")
        for label, value in report.incompatible_deployment.items():
            out(f"incompatible deployment signals {label}: {value}")
        if report.ok:
            out(self.style.SUCCESS("OK: every invariant holds"))
