"""Decide about quarantined jobs from the shell: redrive, replay as a new version (with
corrected input from `--input-file`), or discard."""

from __future__ import annotations

import getpass
import re
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q, QuerySet
from django.utils import timezone

from jobs import quarantine
from jobs.exceptions import JobError, ValidationFailed
from jobs.models import QuarantineRecord, QuarantineStatus

ACTIONS: dict[str, Callable[..., quarantine.Resolution]] = {
    "redrive": quarantine.quarantine_redrive,
    "replay": quarantine.quarantine_replay,
    "discard": quarantine.quarantine_discard,
}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> timedelta:
    """'90s', '30m', '2h', '7d' -> timedelta; anything else is a readable error."""
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise CommandError(
            f"--older-than {text!r} is not a duration; "
            "use a number and a unit, e.g. 90s, 30m, 2h, 7d"
        )
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def parse_ids(values: list[str]) -> Q:
    """Each --id is a quarantine record number or a job UUID."""
    query = Q(pk__in=[])
    for value in values:
        if value.isdigit():
            query |= Q(pk=int(value))
            continue
        try:
            query |= Q(job_id=uuid.UUID(value))
        except ValueError:
            raise CommandError(
                f"--id {value!r} is neither a quarantine record number nor a job UUID"
            ) from None
    return query


def read_corrected_input(path: Path, *, kind: str) -> dict[str, Any]:
    """The corrected input in `path`, checked against `kind`'s schema; a readable error else."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CommandError(f"--input-file {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CommandError(f"--input-file {path}: cannot read it: {reason}") from None
    try:
        return quarantine.corrected_input_load(text, kind=kind)
    except ValidationFailed as exc:
        raise CommandError(f"--input-file {path}: {exc}") from None
    except JobError as exc:  # the kind is unknown to this process
        raise CommandError(f"--input-file {path}: cannot check it: {exc}") from None


def default_actor() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown-operator"


class Command(BaseCommand):
    help = (
        "Redrive (same input version, fresh budget), replay (new input version) or discard "
        "open quarantine records chosen by filters. Use --dry-run to see what would happen."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--id", action="append", default=[], help="record number or job UUID (repeatable)"
        )
        parser.add_argument("--kind", help="exact job kind")
        parser.add_argument("--reason", help="substring of the quarantine reason")
        parser.add_argument("--older-than", help="quarantined at least this long ago: 30m, 2h")
        parser.add_argument(
            "--action",
            choices=sorted(ACTIONS),
            required=True,
            help="redrive: same input version, fresh budget; replay: new input version; "
            "discard: failed for good",
        )
        parser.add_argument(
            "--input-file",
            type=Path,
            default=None,
            help="replay only: the corrected input of the one chosen job, a JSON object "
            "checked against its kind's input schema (without it, replay keeps the input)",
        )
        parser.add_argument("--note", default="", help="why (kept in the audit trail)")
        parser.add_argument("--actor", default=None, help="who decides (default: OS user)")
        parser.add_argument("--dry-run", action="store_true", help="show, change nothing")

    def selected(self, options: dict[str, Any]) -> QuerySet[QuarantineRecord]:
        filters = Q(status=QuarantineStatus.OPEN)
        chosen = False
        if options["id"]:
            filters &= parse_ids(options["id"])
            chosen = True
        if options["kind"]:
            filters &= Q(kind=options["kind"])
            chosen = True
        if options["reason"]:
            filters &= Q(reason__icontains=options["reason"])
            chosen = True
        if options["older_than"]:
            filters &= Q(created_at__lte=timezone.now() - parse_age(options["older_than"]))
            chosen = True
        if not chosen:
            raise CommandError(
                "choose records with at least one filter: --id, --kind, --reason, --older-than"
            )
        return QuarantineRecord.objects.filter(filters).order_by("created_at", "pk")

    def handle(self, *args: Any, **options: Any) -> None:
        records = list(self.selected(options))
        action = options["action"]
        actor = (options["actor"] or default_actor()).strip()
        note = options["note"].strip()
        if not actor:
            raise CommandError("--actor must not be empty")
        if not note and not options["dry_run"]:
            raise CommandError("--note is required: say why, it goes into the audit trail")
        if options["input_file"] is not None and action != "replay":
            raise CommandError("--input-file goes with --action replay")
        if not records:
            self.stdout.write("no open quarantine record matches")
            return
        corrected = self.corrected_input(options["input_file"], records)
        verb = "would" if options["dry_run"] else "will"
        how = ""
        if action == "replay":
            source = options["input_file"]
            how = f" with the input from {source}" if corrected is not None else " (same input)"
        self.stdout.write(f"{len(records)} record(s) {verb} {action}{how}:")
        failures = 0
        for record in records:
            line = f"  #{record.pk} job {record.job_id} {record.kind}: {record.reason}"
            if options["dry_run"]:
                self.stdout.write(line)
                continue
            extra_args = {"corrected_input": corrected} if corrected is not None else {}
            try:
                done = ACTIONS[action](record_id=record.pk, actor=actor, note=note, **extra_args)
            except JobError as exc:  # resolved meanwhile, unknown kind, version clash
                failures += 1
                self.stderr.write(f"{line} -> skipped: {exc}")
                continue
            extra = f" -> new job {done.replacement_id}" if done.replacement_id else ""
            self.stdout.write(f"{line} -> {action} by {actor}{extra}")
        if failures:
            raise CommandError(f"{failures} of {len(records)} record(s) could not be resolved")

    def corrected_input(
        self, path: Path | None, records: list[QuarantineRecord]
    ) -> dict[str, Any] | None:
        """Read and check --input-file before anything changes (also on --dry-run)."""
        if path is None:
            return None
        if len(records) != 1:
            raise CommandError(
                f"--input-file corrects one job, and {len(records)} records match: "
                "choose one with --id"
            )
        return read_corrected_input(path, kind=records[0].kind)
