"""Operator decisions on quarantined jobs: services, `manage.py jobs_redrive`, the audit trail."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

import jobs
from jobs.exceptions import InvalidTransition, ValidationFailed
from jobs.models import Job, JobEvent, QuarantineRecord
from jobs.quarantine import quarantine_discard, quarantine_redrive, quarantine_replay
from jobs.runtime import Outcome
from outbox.models import OutboxEntry
from tests import kinds_operators  # noqa: F401  (registers test.ops.*)
from tests.harness import Harness
from tests.integration.api_helpers import token_client

pytestmark = pytest.mark.django_db(transaction=True)


def quarantined_job(owner: Any, *, document_id: Any = "x", business_key: str | None = None) -> Job:
    """A malformed payload run once in this process: quarantined as permanent."""
    job = jobs.submit(
        kind="drill.malformed",
        input={"document_id": document_id},
        owner=owner,
        business_key=business_key,
    )
    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED
    job.refresh_from_db()
    return job


def test_malformed_payload_quarantined_with_owner__first_attempt(user: Any) -> None:
    job = quarantined_job(user, document_id="private-value-5521")
    assert job.state == "quarantined" and job.attempt == 1
    record = QuarantineRecord.objects.get(job=job)
    assert record.category == "permanent"
    assert record.responsible == "ingest-team"
    assert record.attempts == 1 and record.input_version == 1
    assert record.last_attempt_at is not None
    # The handler's own words, never the payload.
    assert record.reason == "permanent failure: malformed payload: document_id must be an integer"
    assert "private-value-5521" not in record.reason


def test_redrive_requeues_same_version_with_fresh_budget__audit_event(user: Any) -> None:
    job = quarantined_job(user)
    record = QuarantineRecord.objects.get(job=job)
    done = quarantine_redrive(record_id=record.pk, actor="carol", note="parser fixed")
    assert done.action == "redrive" and done.replacement_id is None
    job.refresh_from_db()
    assert (job.state, job.attempt, job.input_version) == ("queued", 0, 1)
    assert job.deadline is not None and job.deadline > timezone.now()
    record.refresh_from_db()
    assert (record.status, record.resolved_by, record.resolution_note) == (
        "redriven",
        "carol",
        "parser fixed",
    )
    assert record.resolved_at is not None
    audit = JobEvent.objects.get(job=job, from_state="quarantined")
    assert (audit.to_state, audit.actor, audit.reason) == (
        "queued",
        "carol",
        "redriven: parser fixed",
    )
    assert OutboxEntry.objects.filter(job_id=job.pk).count() == 2  # submit + redrive


def test_replay_submits_new_input_version_linked_to_old__same_business_key(user: Any) -> None:
    job = quarantined_job(user, business_key="doc-7")
    record = QuarantineRecord.objects.get(job=job)
    done = quarantine_replay(
        record_id=record.pk, actor="carol", note="fixed id", corrected_input={"document_id": 7}
    )
    job.refresh_from_db()
    assert job.state == "failed" and job.finished_at is not None
    assert done.replacement_id is not None
    new = Job.objects.get(pk=done.replacement_id)
    assert (new.input_version, new.business_key, new.replay_of_id) == (2, "doc-7", job.pk)
    assert new.state == "queued" and new.input == {"document_id": 7}
    record.refresh_from_db()
    assert (record.status, record.replacement_id) == ("corrected", new.pk)
    assert jobs.execute(new.pk).outcome is Outcome.SUCCEEDED
    audit = JobEvent.objects.get(job=job, to_state="failed")
    assert audit.actor == "carol"
    assert "replayed as input version 2 with corrected input: fixed id" in audit.reason


def test_discard_marks_failed_for_good__audit_event(user: Any) -> None:
    job = quarantined_job(user)
    record = QuarantineRecord.objects.get(job=job)
    quarantine_discard(record_id=record.pk, actor="dave", note="customer withdrew")
    job.refresh_from_db()
    assert job.state == "failed"
    record.refresh_from_db()
    assert (record.status, record.resolved_by) == ("discarded", "dave")
    audit = JobEvent.objects.get(job=job, to_state="failed")
    assert (audit.actor, audit.reason) == ("dave", "discarded: customer withdrew")
    assert jobs.execute(job.pk).outcome is Outcome.DUPLICATE  # a late message runs nothing


def test_second_decision_refused__record_already_resolved(user: Any) -> None:
    job = quarantined_job(user)
    record = QuarantineRecord.objects.get(job=job)
    quarantine_discard(record_id=record.pk, actor="dave", note="no")
    with pytest.raises(InvalidTransition, match="already discarded"):
        quarantine_redrive(record_id=record.pk, actor="erin", note="yes")
    job.refresh_from_db()
    assert job.state == "failed"


# -- manage.py jobs_redrive -------------------------------------------------------------------


def redrive(*args: str) -> str:
    out = StringIO()
    call_command("jobs_redrive", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_command_dry_run_changes_nothing__lists_matches(user: Any) -> None:
    job = quarantined_job(user)
    output = redrive("--kind", "drill.malformed", "--action", "redrive", "--dry-run")
    assert "1 record(s) would redrive" in output
    assert str(job.pk) in output
    job.refresh_from_db()
    assert job.state == "quarantined"
    assert QuarantineRecord.objects.get(job=job).status == "open"


def test_command_redrives_by_id_with_actor_and_note__audit_event(user: Any) -> None:
    job = quarantined_job(user)
    other = quarantined_job(user)
    output = redrive(
        "--id", str(job.pk), "--action", "redrive", "--note", "fixed", "--actor", "oncall"
    )
    assert "-> redrive by oncall" in output
    job.refresh_from_db()
    other.refresh_from_db()
    assert (job.state, other.state) == ("queued", "quarantined")
    audit = JobEvent.objects.get(job=job, from_state="quarantined")
    assert (audit.actor, audit.reason) == ("oncall", "redriven: fixed")


def test_command_filters_by_record_number_reason_and_age__combined(user: Any) -> None:
    first = quarantined_job(user)
    second = quarantined_job(user)
    QuarantineRecord.objects.filter(job=first).update(
        created_at=timezone.now() - timedelta(hours=3)
    )
    # Only the old one is older than 2h; the reason filter is a case-insensitive substring.
    output = redrive(
        "--reason", "PERMANENT", "--older-than", "2h", "--action", "discard", "--note", "stale"
    )
    assert "1 record(s) will discard" in output
    assert Job.objects.get(pk=first.pk).state == "failed"
    assert Job.objects.get(pk=second.pk).state == "quarantined"
    record = QuarantineRecord.objects.get(job=second)
    redrive("--id", str(record.pk), "--action", "replay", "--note", "again", "--actor", "x")
    record.refresh_from_db()
    assert record.status == "corrected" and record.replacement_id is not None


def test_command_reports_nothing_to_do__no_open_match(user: Any) -> None:
    assert "no open quarantine record matches" in redrive(
        "--kind", "nope", "--action", "redrive", "--note", "n"
    )


def test_command_defaults_actor_to_os_user__no_actor(user: Any) -> None:
    import getpass

    job = quarantined_job(user)
    redrive("--id", str(job.pk), "--action", "discard", "--note", "bye")
    assert QuarantineRecord.objects.get(job=job).resolved_by == getpass.getuser()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--action", "redrive", "--note", "n"], "at least one filter"),
        (["--older-than", "2 hours", "--action", "redrive", "--note", "n"], "not a duration"),
        (["--id", "job-7", "--action", "redrive", "--note", "n"], "neither a quarantine record"),
        (["--kind", "drill.malformed", "--action", "redrive"], "--note is required"),
        (["--kind", "x", "--action", "redrive", "--note", "n", "--actor", " "], "--actor"),
    ],
)
def test_command_refuses_bad_input_readably__invalid_arguments(
    user: Any, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        redrive(*args)


def test_command_exits_non_zero_with_readable_error__subprocess(harness: Harness) -> None:
    bad_age = harness.manage(
        "jobs_redrive", "--older-than", "soon", "--action", "redrive", "--note", "n", check=False
    )
    assert bad_age.returncode != 0
    assert "--older-than 'soon' is not a duration" in bad_age.stderr
    assert "Traceback" not in bad_age.stderr
    bad_action = harness.manage("jobs_redrive", "--kind", "k", "--action", "retry", check=False)
    assert bad_action.returncode != 0
    assert "invalid choice: 'retry'" in bad_action.stderr


def test_command_replay_refused_readably__next_input_version_exists(user: Any) -> None:
    job = quarantined_job(user, business_key="doc-9")
    jobs.submit(
        kind="drill.malformed",
        input={"document_id": 9},
        owner=user,
        business_key="doc-9",
        input_version=2,
    )
    err = StringIO()
    with pytest.raises(CommandError, match="1 of 1 record"):
        call_command(
            "jobs_redrive",
            "--id",
            str(job.pk),
            "--action",
            "replay",
            "--note",
            "n",
            stdout=StringIO(),
            stderr=err,
        )
    assert "skipped" in err.getvalue() and "input_version" in err.getvalue()
    job.refresh_from_db()
    assert job.state == "quarantined"  # the whole decision rolled back
    assert QuarantineRecord.objects.get(job=job).status == "open"


# -- quarantine reasons: the handler's message, never the input -------------------------------


def document_quarantined(owner: Any, **submit: Any) -> QuarantineRecord:
    """test.ops.document with document 0: the handler refuses it for good."""
    job = jobs.submit(kind="test.ops.document", input={"document_id": 0}, owner=owner, **submit)
    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED
    return QuarantineRecord.objects.get(job=job)


def test_quarantine_reason_carries_the_handlers_message__permanent_error(user: Any) -> None:
    record = document_quarantined(user)

    assert record.reason == "permanent failure: the upstream archive has no such document"
    job = Job.objects.get(pk=record.job_id)
    assert job.error_message == "PermanentError: the upstream archive has no such document"


def test_quarantine_reason_names_the_schema_rule_not_the_value__input_fails_its_schema(
    user: Any,
) -> None:
    job = jobs.submit(kind="test.ops.document", input={"document_id": 3}, owner=user)
    # A row written by other code (a factory): input that its kind's schema refuses.
    Job.objects.filter(pk=job.pk).update(input={"document_id": "private-value-8812"})

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    record = QuarantineRecord.objects.get(job=job)
    assert record.reason == (
        "permanent failure: validation: "
        'input does not match test.ops.document: document_id: type "integer"'
    )
    assert "private-value-8812" not in record.reason
    # The job's own error keeps the whole message for its owner and staff.
    assert "private-value-8812" in Job.objects.get(pk=job.pk).error_message


def test_quarantine_reason_keeps_the_last_message__elapsed_budget_spent(user: Any) -> None:
    job = jobs.submit(kind="drill.always_transient", input={}, owner=user)
    Job.objects.filter(pk=job.pk).update(deadline=timezone.now() - timedelta(seconds=1))

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    record = QuarantineRecord.objects.get(job=job)
    assert record.reason == "elapsed budget exhausted: TransientError: still down"


# -- replay with corrected input: the service and `jobs_redrive --input-file` -----------------


def test_replay_with_corrected_input_refused__schema_mismatch_changes_nothing(user: Any) -> None:
    record = document_quarantined(user)
    jobs_before = Job.objects.count()

    with pytest.raises(ValidationFailed, match="document_id"):
        quarantine_replay(
            record_id=record.pk, actor="carol", note="n", corrected_input={"document_id": "7"}
        )

    record.refresh_from_db()
    assert record.status == "open"
    assert Job.objects.get(pk=record.job_id).state == "quarantined"
    assert Job.objects.count() == jobs_before


def test_command_replays_with_the_input_file__new_version_runs_it(
    user: Any, tmp_path: Path
) -> None:
    record = document_quarantined(user, business_key="doc-21")
    corrected = tmp_path / "corrected.json"
    corrected.write_text(json.dumps({"document_id": 21}))

    output = redrive(
        "--id", str(record.pk), "--action", "replay", "--input-file", str(corrected),
        "--note", "id fixed by hand",
    )  # fmt: skip

    assert f"1 record(s) will replay with the input from {corrected}" in output
    record.refresh_from_db()
    assert record.replacement_id is not None
    new = Job.objects.get(pk=record.replacement_id)
    assert (new.input, new.input_version, new.replay_of_id) == (
        {"document_id": 21},
        2,
        record.job_id,
    )
    assert jobs.execute(new.pk).outcome is Outcome.SUCCEEDED
    audit = JobEvent.objects.get(job_id=record.job_id, to_state="failed")
    assert audit.reason == "replayed as input version 2 with corrected input: id fixed by hand"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ('{"document_id": 21', "not valid JSON: Expecting ',' delimiter at line 1, column 19"),
        ("[21]", "the input must be a JSON object, not list"),
        ('{"document_id": "21"}', "input does not match test.ops.document: document_id: '21' is"),
        (
            '{"document_id": 21, "x": 1}',
            "input does not match test.ops.document: (root): Additional properties are not",
        ),
    ],
)
def test_command_input_file_refused_readably__nothing_changes(
    user: Any, tmp_path: Path, content: str | None, message: str
) -> None:
    record = document_quarantined(user)
    path = tmp_path / "corrected.json"
    if content is not None:
        path.write_text(content)
    jobs_before = Job.objects.count()

    with pytest.raises(CommandError, match=re.escape(f"--input-file {path}: {message}")):
        redrive("--id", str(record.pk), "--action", "replay", "--input-file", str(path),
                "--note", "n")  # fmt: skip

    record.refresh_from_db()
    assert record.status == "open"
    assert Job.objects.get(pk=record.job_id).state == "quarantined"
    assert Job.objects.count() == jobs_before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "test.ops.document", "--action", "replay"], "corrects one job, and 2 records"),
        (["--kind", "test.ops.document", "--action", "redrive"], "goes with --action replay"),
    ],
)
def test_command_input_file_refused__not_one_replay(
    user: Any, tmp_path: Path, args: list[str], message: str
) -> None:
    first, second = document_quarantined(user), document_quarantined(user)
    path = tmp_path / "corrected.json"
    path.write_text('{"document_id": 4}')

    with pytest.raises(CommandError, match=message):
        redrive(*args, "--input-file", str(path), "--note", "n")

    assert {r.status for r in QuarantineRecord.objects.filter(pk__in=[first.pk, second.pk])} == {
        "open"
    }


def test_command_input_file_exits_non_zero_with_readable_error__subprocess(
    harness: Harness, user: Any, tmp_path: Path
) -> None:
    record = document_quarantined(user)
    path = tmp_path / "corrected.json"
    path.write_text('{"document_id": -1}')

    done = harness.manage(
        "jobs_redrive", "--id", str(record.pk), "--action", "replay", "--input-file", str(path),
        "--note", "n", check=False, JOBS_HANDLER_MODULES="tests.kinds_operators",
    )  # fmt: skip

    assert done.returncode != 0
    assert f"--input-file {path}: input does not match test.ops.document" in done.stderr
    assert "Traceback" not in done.stderr
    record.refresh_from_db()
    assert record.status == "open"


# -- what the client sees ----------------------------------------------------------------------


def test_api_status_of_a_quarantined_job__failed_finished_when_quarantined(user: Any) -> None:
    record = document_quarantined(user)
    job = Job.objects.get(pk=record.job_id)
    client = token_client(user)

    body = client.get(f"/api/jobs/{job.pk}/").json()

    assert body["status"] == "failed"
    assert body["finished_at"] is not None
    finished = datetime.fromisoformat(body["finished_at"].replace("Z", "+00:00"))
    assert finished == job.updated_at
    assert job.finished_at is None  # the row: an operator may still redrive it
    assert body["error"]["message"] == "PermanentError: the upstream archive has no such document"
    listed = client.get("/api/jobs/?status=failed").json()
    assert [(j["id"], j["finished_at"]) for j in listed["results"]] == [
        (str(job.pk), body["finished_at"])
    ]
    # Redriven, it is active again: no end time.
    quarantine_redrive(record_id=record.pk, actor="carol", note="retry")
    again = client.get(f"/api/jobs/{job.pk}/").json()
    assert (again["status"], again["finished_at"]) == ("queued", None)
