"""Operator decisions on quarantined jobs: redrive, replay as a new input version, discard.

Each one is a guarded transition of the job plus the quarantine record, with an audit event
that names who decided and why. A replay may carry corrected input (the admin's form,
`jobs_redrive --input-file`): it is checked against the kind's input schema before anything
changes, and a refusal leaves the job and its record as they were.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from . import registry
from .dispatch import job_enqueue_execute
from .exceptions import InvalidTransition, ValidationFailed
from .models import Job, QuarantineRecord, QuarantineStatus
from .services import job_transition
from .states import JobState
from .submission import job_submit


@dataclass(frozen=True)
class Resolution:
    record_id: int
    job_id: str
    action: str
    replacement_id: str | None = None


def corrected_input_load(text: str, *, kind: str) -> dict[str, Any]:
    """Parse corrected input (JSON text) and check it against `kind`'s input schema;
    ValidationFailed says what is wrong (the JSON position, or the schema's complaint)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationFailed(
            f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    if not isinstance(data, dict):
        raise ValidationFailed(f"the input must be a JSON object, not {type(data).__name__}")
    registry.kind_latest(kind).validate(data)
    return data


def _open_record(record_id: int) -> QuarantineRecord:
    record = QuarantineRecord.objects.select_for_update().select_related("job").get(pk=record_id)
    if record.status != QuarantineStatus.OPEN:
        raise InvalidTransition(f"quarantine record {record_id} is already {record.status}")
    return record


def _resolve(record: QuarantineRecord, *, status: str, actor: str, note: str, **extra: Any) -> None:
    updated = QuarantineRecord.objects.filter(pk=record.pk, status=QuarantineStatus.OPEN).update(
        status=status, resolved_by=actor, resolution_note=note, resolved_at=timezone.now(), **extra
    )
    if updated != 1:
        raise InvalidTransition(f"quarantine record {record.pk} was resolved concurrently")


def quarantine_redrive(*, record_id: int, actor: str, note: str) -> Resolution:
    """Retry the same input version with a fresh attempt and elapsed budget."""
    with transaction.atomic():
        record = _open_record(record_id)
        job = Job.objects.select_for_update().get(pk=record.job_id)
        spec = registry.kind_latest(job.kind)
        now = timezone.now()
        job_transition(
            job=job,
            to=JobState.QUEUED,
            actor=actor,
            reason=f"redriven: {note}"[:500],
            attempt=0,
            kind_version=spec.version,
            max_attempts=spec.policy.max_attempts,
            next_attempt_at=now,
            deadline=now + timedelta(seconds=spec.policy.max_elapsed),
            error_category="",
            error_message="",
            cancel_requested_at=None,
        )
        job_enqueue_execute(job)
        _resolve(record, status=QuarantineStatus.REDRIVEN, actor=actor, note=note)
    return Resolution(record.pk, str(job.pk), "redrive")


def quarantine_replay(
    *, record_id: int, actor: str, note: str, corrected_input: dict[str, Any] | None = None
) -> Resolution:
    """End the old job as failed and submit a new input version linked to it, with
    `corrected_input` when given (checked against the kind's schema first), else the same."""
    with transaction.atomic():
        record = _open_record(record_id)
        job = Job.objects.select_for_update().get(pk=record.job_id)
        if corrected_input is not None:
            registry.kind_latest(job.kind).validate(corrected_input)
        now = timezone.now()
        job_transition(
            job=job,
            to=JobState.FAILED,
            actor=actor,
            reason=(
                f"replayed as input version {job.input_version + 1}"
                f"{' with corrected input' if corrected_input is not None else ''}: {note}"
            )[:500],
            finished_at=now,
        )
        replacement = job_submit(
            kind=job.kind,
            input=corrected_input if corrected_input is not None else job.input,
            owner=job.owner,
            tenant=job.tenant,
            business_key=job.business_key,
            input_version=job.input_version + 1,
            serialization_key=job.serialization_key,
            input_ref=job.input_ref,
            replay_of=job,
            callback_url=job.callback_url,  # the replacement's end is announced too
        )
        _resolve(
            record,
            status=QuarantineStatus.CORRECTED,
            actor=actor,
            note=note,
            replacement=replacement,
        )
    return Resolution(record.pk, str(job.pk), "replay", str(replacement.pk))


def quarantine_discard(*, record_id: int, actor: str, note: str) -> Resolution:
    """Mark the job failed for good."""
    with transaction.atomic():
        record = _open_record(record_id)
        job = Job.objects.select_for_update().get(pk=record.job_id)
        job_transition(
            job=job,
            to=JobState.FAILED,
            actor=actor,
            reason=f"discarded: {note}"[:500],
            finished_at=timezone.now(),
        )
        _resolve(record, status=QuarantineStatus.DISCARDED, actor=actor, note=note)
    return Resolution(record.pk, str(job.pk), "discard")
