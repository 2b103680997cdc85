"""A job's admin page and the replay-with-corrected-input form in a real headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Browser

import jobs
from jobs.models import EffectLedgerEntry, Job, QuarantineRecord
from jobs.runtime import Outcome, execute
from tests import kinds_operators  # noqa: F401  (registers test.ops.*)
from tests.browser.test_ops_page import ARTIFACTS, _login, _text, browser  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def _on_call_operator() -> User:
    staff = User.objects.create_user(username="operator", password="s3cret-pw", is_staff=True)
    names = [
        "view_job",
        "view_jobevent",
        "view_effectledgerentry",
        "view_quarantinerecord",
        "redrive_quarantinerecord",
    ]
    staff.user_permissions.add(*Permission.objects.filter(codename__in=names))
    return staff


def test_replay_with_corrected_input__form_refuses_then_replays__headless_chromium(
    browser: Browser,  # noqa: F811
    live_server: Any,
    user: Any,
) -> None:
    job = jobs.submit(kind="test.ops.document", input={"document_id": 0}, owner=user)
    assert execute(job.pk).outcome is Outcome.QUARANTINED
    EffectLedgerEntry.objects.create(
        job=job, input_version=1, name="archive_lookup", idempotency_key="key-archive-1",
        state="failed", generation=1, calls=1, last_error="404 from the archive",
    )  # fmt: skip
    record = QuarantineRecord.objects.get(job=job)
    _on_call_operator()
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1300, "height": 1000})

    _login(page, live_server.url, f"/admin/jobs/job/{job.pk}/change/")
    assert "key-archive-1" in _text(page, "#content-main")
    assert "the upstream archive has no such document" in _text(page, "#content-main")
    page.screenshot(path=str(ARTIFACTS / "job-admin-inlines.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/jobs/quarantinerecord/")
    page.click("text=replay with corrected input…")
    page.wait_for_selector("#replay-form")
    assert '"document_id": 0' in page.input_value("textarea[name=input]")
    page.fill("input[name=note]", "archive id typo")
    page.fill("textarea[name=input]", '{"document_id": "twelve"}')
    page.click("#replay-form input[type=submit]")
    page.wait_for_selector(".errorlist")
    assert "input does not match test.ops.document" in _text(page, ".errorlist")
    page.screenshot(path=str(ARTIFACTS / "quarantine-replay-refused.png"), full_page=True)
    record.refresh_from_db()
    assert record.status == "open"

    page.fill("textarea[name=input]", '{"document_id": 12}')
    page.click("#replay-form input[type=submit]")
    page.wait_for_selector(".messagelist")
    assert "corrected input" in _text(page, ".messagelist")
    page.close()

    record.refresh_from_db()
    assert record.status == "corrected" and record.replacement_id is not None
    assert Job.objects.get(pk=record.replacement_id).input == {"document_id": 12}
