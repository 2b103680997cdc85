"""jobs.rows: the one builder of a new job's rows, read by job_submit (model instances) and
submit_many (columns); and the outbox's reservation rule both writers' outbox rows follow."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from jobs import bulk, rows
from jobs.events import job_event_new
from jobs.models import Job, Tenant
from jobs.registry import KindSpec
from jobs.retry import RetryPolicy
from jobs.submission import job_submit
from outbox.conf import outbox_settings
from outbox.services import outbox_entry_new, outbox_reserved_until

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SPEC = KindSpec(
    kind="rows.echo",
    version=3,
    fn=lambda ctx, data: {},
    policy=RetryPolicy(max_attempts=7, max_elapsed=600.0),
    lease_seconds=30.0,
    responsible="team-rows",
)


def _checked(**fields: Any) -> rows.CheckedSubmit:
    request: dict[str, Any] = {
        "kind": "rows.echo",
        "input": {"n": 1},
        "owner": User(pk=11, username="owner"),
        "tenant": None,
        "business_key": None,
        "input_version": 1,
        "idempotency_key": None,
        "serialization_key": None,
        "input_ref": None,
        "replay_of": None,
        "run_after": None,
        **fields,
    }
    return rows.CheckedSubmit(rows.SubmitRequest(**request), SPEC, "f" * 64)


def test_submit_request__has_job_submits_keywords_in_its_order() -> None:
    # job_submit builds a SubmitRequest from its keywords by position.
    *fields, job_id = rows.SubmitRequest._fields  # job_id: ctx.submit's only
    assert (tuple(fields), job_id) == (tuple(inspect.signature(job_submit).parameters), "job_id")


def test_job_values__due_now__budgets_from_its_kind() -> None:
    values = rows.job_values(_checked(), NOW)

    assert values["kind_version"] == 3
    assert values["max_attempts"] == 7
    assert values["next_attempt_at"] == NOW
    assert values["deadline"] == NOW + timedelta(seconds=600)
    assert values["request_fingerprint"] == "f" * 64
    assert isinstance(values["id"], type(Job._meta.get_field("id").get_default()))


def test_job_values__run_after__due_then_and_elapsed_budget_from_then() -> None:
    later = NOW + timedelta(hours=1)

    values = rows.job_values(_checked(run_after=later), NOW)

    assert values["next_attempt_at"] == later
    assert values["deadline"] == later + timedelta(seconds=600)


def test_job_values__run_after_in_the_past__due_now() -> None:
    values = rows.job_values(_checked(run_after=NOW - timedelta(days=1)), NOW)

    assert values["next_attempt_at"] == NOW


def test_job_values__each_job_a_new_id() -> None:
    checked = _checked()

    assert rows.job_values(checked, NOW)["id"] != rows.job_values(checked, NOW)["id"]


def test_job_values__make_a_queued_job_with_its_related_rows() -> None:
    tenant = Tenant(pk=5, name="t")
    checked = _checked(tenant=tenant)

    job = Job(**rows.NEW_JOB, **rows.job_values(checked, NOW))

    assert job.state == "queued"
    assert job.tenant is tenant and job.owner is checked.request.owner
    assert (job.generation, job.attempt) == (0, 0)


def test_bulk_columns__are_every_field_of_job_values() -> None:
    # submit_many writes every value job_submit writes, nothing else varies per job.
    names = set(rows.job_values(_checked(), NOW))

    assert set(bulk._JOB_COLUMNS) | set(bulk._RELATED) == names
    assert not set(bulk._JOB_COLUMNS) & set(bulk._RELATED)


def test_accepted_event__queued_from_nothing_at_the_jobs_generation() -> None:
    job = Job(**rows.NEW_JOB, **rows.job_values(_checked(), NOW))

    event = job_event_new(job, **rows.ACCEPTED_EVENT, details=rows.accepted_details(None))

    assert (event.from_state, event.to_state, event.reason) == ("", "queued", "accepted")
    assert (event.generation, event.attempt, event.details) == (0, 0, {})


def test_accepted_details__name_the_run_after_asked() -> None:
    later = NOW + timedelta(minutes=5)

    assert rows.accepted_details(later) == {"run_after": later.isoformat()}
    assert rows.accepted_details(None) == {}


@override_settings(OUTBOX_FAST_PATH=True, OUTBOX_RESERVATION_SECONDS=30)
def test_outbox_reserved_until__fast_path_and_due_now__reserved_for_the_writer() -> None:
    assert outbox_reserved_until(due=NOW, now=NOW) == NOW + timedelta(seconds=30)
    assert outbox_reserved_until(due=NOW - timedelta(seconds=1), now=NOW) is not None


@override_settings(OUTBOX_FAST_PATH=True)
def test_outbox_reserved_until__due_later__the_relays() -> None:
    assert outbox_reserved_until(due=NOW + timedelta(microseconds=1), now=NOW) is None


@pytest.mark.parametrize(
    ("setting", "asked", "reserved"),
    [(False, None, False), (True, False, False), (False, True, True)],
)
def test_outbox_reserved_until__fast_path_asked__overrides_the_setting(
    setting: bool, asked: bool | None, reserved: bool
) -> None:
    with override_settings(OUTBOX_FAST_PATH=setting):
        assert (outbox_reserved_until(due=NOW, now=NOW, fast_path=asked) is not None) == reserved


@override_settings(OUTBOX_FAST_PATH=True)
def test_outbox_entry_new__reserves_by_the_same_rule() -> None:
    due_now = outbox_entry_new(task_name="t", queue="q")
    due_later = outbox_entry_new(
        task_name="t", queue="q", available_at=datetime.now(UTC) + timedelta(hours=1)
    )

    assert due_now.reserved_until == due_now.available_at + timedelta(
        seconds=outbox_settings.RESERVATION_SECONDS
    )
    assert due_later.reserved_until is None
