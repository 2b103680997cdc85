"""Admin: read-only job pages, quarantine decisions through services, no COUNT(*) on jobs."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

import jobs
from jobs.models import Job, JobEvent, QuarantineRecord
from jobs.ops import paginator as paginator_module
from jobs.ops.paginator import EstimatedCountPaginator
from jobs.runtime import Outcome, execute

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
    assert b"Write a note saying why" in response.content
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
        "/admin/jobs/signal/",
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
