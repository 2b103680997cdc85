"""Admin: read-only job pages, quarantine decisions through services, no COUNT(*) on jobs."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from django.contrib.admin.utils import display_for_value
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

import jobs
from jobs.admin import INLINE_ROWS
from jobs.models import EffectLedgerEntry, Job, JobEvent, QuarantineRecord
from jobs.runtime import Outcome, execute
from outbox import paginator as paginator_module
from outbox.paginator import EstimatedCountPaginator
from tests import kinds_operators  # noqa: F401  (registers test.ops.*)

pytestmark = pytest.mark.django_db(transaction=True)

QUARANTINE_URL = "/admin/jobs/quarantinerecord/"


def quarantined_job(owner: Any, n: int) -> QuarantineRecord:
    """A real quarantine: drill.malformed fails permanently on its first attempt."""
    job = jobs.submit(kind="drill.malformed", input={"document_id": f"bad-{n}"}, owner=owner)
    assert execute(job.pk).outcome is Outcome.QUARANTINED
    return QuarantineRecord.objects.get(job=job)


def staff_client(*, can_redrive: bool, username: str = "operator") -> Client:
    staff = User.objects.create_user(username=username, password="pw", is_staff=True)
    names = ["view_job", "view_jobevent", "view_quarantinerecord", "view_effectledgerentry"]
    if can_redrive:
        names.append("redrive_quarantinerecord")
    staff.user_permissions.add(*Permission.objects.filter(codename__in=names))
    client = Client()
    client.force_login(staff)
    return client


def _act(client: Client, action: str, records: list[QuarantineRecord], note: str) -> Any:
    return client.post(
        QUARANTINE_URL,
        {"action": action, "index": 0, "_selected_action": [r.pk for r in records], "note": note},
        follow=True,
    )


def test_quarantine_actions_redrive_replay_discard__through_services_with_actor(user: Any) -> None:
    redrive, replay, discard = (quarantined_job(user, n) for n in range(3))
    client = staff_client(can_redrive=True)

    page = client.get(QUARANTINE_URL + "?status__exact=open")
    assert page.status_code == 200
    assert b"Redrive: retry the same input version" in page.content

    _act(client, "redrive_same_version", [redrive], "parser fixed in v2")
    _act(client, "replay_new_version", [replay], "corrected upstream")
    response = _act(client, "discard", [discard], "duplicate upload")
    assert b"Discarded: 1 quarantined job(s)." in response.content

    redrive.refresh_from_db()
    replay.refresh_from_db()
    discard.refresh_from_db()
    assert (redrive.status, redrive.resolved_by, redrive.resolution_note) == (
        "redriven",
        "operator",
        "parser fixed in v2",
    )
    assert Job.objects.get(pk=redrive.job_id).state == "queued"
    assert replay.status == "corrected" and replay.replacement is not None
    assert replay.replacement.input_version == 2
    assert Job.objects.get(pk=discard.job_id).state == "failed"
    assert JobEvent.objects.filter(actor="operator").count() == 3


def test_quarantine_actions_refused__without_redrive_permission(user: Any) -> None:
    record = quarantined_job(user, 0)
    client = staff_client(can_redrive=False, username="viewer")
    page = client.get(QUARANTINE_URL)
    assert page.status_code == 200
    assert b"redrive_same_version" not in page.content
    _act(client, "redrive_same_version", [record], "sneaky")
    record.refresh_from_db()
    assert record.status == "open"
    assert Job.objects.get(pk=record.job_id).state == "quarantined"


def test_quarantine_action_refused__without_a_note(user: Any) -> None:
    record = quarantined_job(user, 0)
    response = _act(staff_client(can_redrive=True), "discard", [record], "  ")
    assert b"Write a note saying why before you discard." in response.content
    record.refresh_from_db()
    assert record.status == "open"


def test_quarantine_action_leaves_resolved_records_alone__second_decision(user: Any) -> None:
    record = quarantined_job(user, 0)
    client = staff_client(can_redrive=True)
    _act(client, "discard", [record], "first")
    response = _act(client, "redrive_same_version", [record], "second")
    assert b"already resolved; left alone" in response.content
    record.refresh_from_db()
    assert record.status == "discarded" and record.resolution_note == "first"


def test_job_admin_is_read_only__no_add_change_or_delete(user: Any) -> None:
    record = quarantined_job(user, 0)
    client = staff_client(can_redrive=True)
    detail = client.get(f"/admin/jobs/job/{record.job_id}/change/")
    assert detail.status_code == 200
    assert b"quarantined" in detail.content and b"claimed" in detail.content  # event inline
    assert b'name="_save"' not in detail.content
    assert client.get("/admin/jobs/job/add/").status_code == 403
    assert client.get(f"/admin/jobs/job/{record.job_id}/delete/").status_code == 403
    superuser = User.objects.create_superuser(username="root", password="pw")
    root = Client()
    root.force_login(superuser)
    for url in [
        "/admin/jobs/job/",
        "/admin/jobs/jobevent/",
        "/admin/jobs/effectledgerentry/",
        "/admin/outbox/outboxentry/",
        "/admin/outbox/outboxentry/?published=no",
        "/admin/jobs/tenant/",
        "/admin/jobs/storedobject/",
        "/admin/jobs/counter/",
        "/admin/jobs/workerheartbeat/",
        "/admin/django_celery_results/taskresult/",
        "/admin/jobs/job/?state__exact=quarantined&kind=drill.malformed",
    ]:
        assert root.get(url).status_code == 200, url


def test_job_changelist_never_counts_the_whole_table__estimated_paginator(
    user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paginator_module, "EXACT_BELOW", 5)
    for n in range(12):
        jobs.submit(kind="noop", input={"n": n}, owner=user)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    root = Client()
    root.force_login(User.objects.create_superuser(username="root", password="pw"))
    with CaptureQueriesContext(connection) as queries:
        assert root.get("/admin/jobs/job/").status_code == 200
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and "jobs_job" in q["sql"]]
    assert counts == [], counts
    assert any("reltuples" in q["sql"] for q in queries)

    estimated = EstimatedCountPaginator(Job.objects.order_by("pk"), 5).count
    assert estimated == 12  # reltuples after ANALYZE
    filtered = EstimatedCountPaginator(Job.objects.filter(kind="noop").order_by("pk"), 5).count
    assert filtered >= 6  # bounded count hit the bound, then the planner's estimate
    small = EstimatedCountPaginator(Job.objects.filter(kind="nothing").order_by("pk"), 5).count
    assert small == 0


# -- a job's page: its ledger, events and quarantine inline --------------------------------------


def test_job_page_shows_ledger_events_and_quarantine__read_only_inlines(user: Any) -> None:
    record = quarantined_job(user, 0)
    EffectLedgerEntry.objects.create(
        job_id=record.job_id,
        input_version=1,
        name="completion_notice",
        idempotency_key="ledger-key-7731",
        state="applied",
        generation=1,
        calls=1,
        applied_at=record.created_at,
    )
    client = staff_client(can_redrive=True)

    page = client.get(f"/admin/jobs/job/{record.job_id}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    assert "Effect ledger" in text and "ledger-key-7731" in text and "completion_notice" in text
    assert "malformed payload: document_id must be an integer" in text  # the quarantine inline
    assert f"/admin/jobs/effectledgerentry/?q={record.job_id}" in text
    assert 'name="_save"' not in text and "effectledgerentry_set-0-name" not in text


def _admin_field(page: str, label: str) -> str:
    """The shown value of a read-only field on an admin change page."""
    found = re.search(
        rf"<label>{re.escape(label)}:</label>\s*<div class=\"readonly\">(.*?)</div>", page, re.S
    )
    assert found, f"no read-only field {label!r}"
    return found.group(1).strip()


def test_job_page_shows_when_it_finished__quarantined_job_as_the_api_says(user: Any) -> None:
    record = quarantined_job(user, 0)
    api = Client()
    api.force_login(user)
    finished = api.get(f"/api/jobs/{record.job_id}/").json()["finished_at"]
    assert finished is not None
    shown = display_for_value(datetime.fromisoformat(finished), "-")
    client = staff_client(can_redrive=False)

    page = client.get(f"/admin/jobs/job/{record.job_id}/change/").content.decode()
    listed = client.get("/admin/jobs/job/?state__exact=quarantined").content.decode()

    assert _admin_field(page, "Finished at") == shown
    assert f'<td class="field-finished">{shown}</td>' in listed


def test_job_page_caps_each_inline__more_events_than_the_cap(user: Any) -> None:
    record = quarantined_job(user, 0)
    job = Job.objects.get(pk=record.job_id)
    JobEvent.objects.bulk_create(
        JobEvent(job=job, from_state="leased", to_state="leased", generation=1, attempt=1,
                 reason=f"note {n}")
        for n in range(3 * INLINE_ROWS)
    )  # fmt: skip
    total = JobEvent.objects.filter(job=job).count()
    client = staff_client(can_redrive=True)

    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/admin/jobs/job/{job.pk}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    assert f"Showing the newest {INLINE_ROWS} of {total}." in text
    assert text.count('class="field-reason"') <= INLINE_ROWS + 1  # events + the quarantine row
    assert f"note {3 * INLINE_ROWS - 1}" in text and "note 0<" not in text  # newest first
    assert f"/admin/jobs/jobevent/?q={job.pk}" in text
    # A fixed number of queries, not one per event: the page does not grow with the trail.
    assert len(queries) < 40, [q["sql"] for q in queries]


# -- replay with corrected input --------------------------------------------------------------


def document_quarantined(owner: Any) -> QuarantineRecord:
    job = jobs.submit(kind="test.ops.document", input={"document_id": 0}, owner=owner)
    assert execute(job.pk).outcome is Outcome.QUARANTINED
    return QuarantineRecord.objects.get(job=job)


def replay_url(record: QuarantineRecord) -> str:
    return f"{QUARANTINE_URL}{record.pk}/replay/"


def test_replay_with_corrected_input__new_version_runs_the_corrected_input(user: Any) -> None:
    record = document_quarantined(user)
    client = staff_client(can_redrive=True)

    listing = client.get(QUARANTINE_URL).content.decode()
    assert replay_url(record) in listing
    form = client.get(replay_url(record))
    assert form.status_code == 200
    assert "&quot;document_id&quot;: 0" in form.content.decode()  # today's input, to correct

    response = client.post(
        replay_url(record),
        {"note": "archive id fixed", "input": '{"document_id": 12}'},
        follow=True,
    )

    record.refresh_from_db()
    assert record.status == "corrected" and record.resolved_by == "operator"
    assert record.replacement_id is not None
    new = Job.objects.get(pk=record.replacement_id)
    assert (new.input, new.input_version, new.replay_of_id) == (
        {"document_id": 12},
        2,
        record.job_id,
    )
    assert response.redirect_chain[-1][0] == f"/admin/jobs/job/{new.pk}/change/"
    assert f"as job {new.pk}" in response.content.decode()
    assert execute(new.pk).outcome is Outcome.SUCCEEDED


@pytest.mark.parametrize(
    ("note", "text", "error"),
    [
        ("fix", '{"document_id": 12', "not valid JSON: Expecting"),
        ("fix", "[12]", "the input must be a JSON object, not list"),
        ("fix", '{"document_id": "12"}', "input does not match test.ops.document: document_id"),
        ("fix", '{"document_id": -3}', "-3 is less than the minimum of 0"),
        ("  ", '{"document_id": 12}', "Write a note saying why before you replay."),
    ],
)
def test_replay_with_corrected_input_refused__error_in_the_form_nothing_changes(
    user: Any, note: str, text: str, error: str
) -> None:
    record = document_quarantined(user)
    jobs_before = Job.objects.count()

    response = staff_client(can_redrive=True).post(
        replay_url(record), {"note": note, "input": text}
    )

    assert response.status_code == 200  # the form again, with its error
    assert error in response.content.decode().replace("&#x27;", "'")
    assert text.replace('"', "&quot;") in response.content.decode()  # what was typed, kept
    record.refresh_from_db()
    assert record.status == "open"
    assert Job.objects.get(pk=record.job_id).state == "quarantined"
    assert Job.objects.count() == jobs_before


def test_replay_with_corrected_input_refused__without_redrive_permission(user: Any) -> None:
    record = document_quarantined(user)
    client = staff_client(can_redrive=False, username="viewer")

    assert client.get(replay_url(record)).status_code == 403
    assert client.post(replay_url(record), {"note": "n", "input": "{}"}).status_code == 403
    assert replay_url(record) not in client.get(QUARANTINE_URL).content.decode()
    record.refresh_from_db()
    assert record.status == "open"
