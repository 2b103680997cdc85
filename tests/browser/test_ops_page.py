"""/ops/ and the quarantine admin in a real headless Chromium (system binary, Playwright)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connections
from django.utils import timezone
from playwright.sync_api import Browser, Page, sync_playwright

import jobs
from jobs.claims import job_claim
from jobs.models import Job, QuarantineRecord
from jobs.ops.workers import worker_heartbeat_record
from jobs.runtime import Outcome, execute
from outbox.models import OutboxEntry

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Browser]:
    # Playwright's sync API runs an event loop in this thread; our ORM calls here stay sync.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (CI installs it)")
    earlier = set(threading.enumerate())  # another module's live server is not ours to wait on
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield instance
        finally:
            # ORM calls made while Playwright's loop runs get their own connection (asgiref
            # locals follow the context); close it here, in that context, or it outlives the DB.
            connections.close_all()
            instance.close()
    _join_live_server_request_threads(started_after=earlier)


def _join_live_server_request_threads(*, started_after: set[threading.Thread]) -> None:
    """Keep-alive request threads of this browser's pages hold a DB connection until the
    browser hangs up; wait for them so the test database can be dropped at the end of the
    session. Threads alive before the browser started belong to other tests' servers."""
    for thread in threading.enumerate():
        if "process_request_thread" in thread.name and thread not in started_after:
            thread.join(timeout=30)
            assert not thread.is_alive(), f"live server request thread {thread.name} hangs"


def _scene(owner: Any, settings: Any) -> dict[str, int]:
    """Real rows: 2 quarantined, 3 queued (unpublished), 1 succeeded, 1 expired lease, 1 worker."""
    settings.OUTBOX_FAST_PATH = False
    for n in range(2):
        bad = jobs.submit(kind="drill.malformed", input={"document_id": f"x{n}"}, owner=owner)
        assert execute(bad.pk).outcome is Outcome.QUARANTINED
    ok = jobs.submit(kind="noop", input={"n": "done"}, owner=owner)
    assert execute(ok.pk).outcome is Outcome.SUCCEEDED
    stuck = jobs.submit(kind="noop", input={"n": "stuck"}, owner=owner)
    assert job_claim(stuck, worker="ghost:1", lease_seconds=30) is not None
    Job.objects.filter(pk=stuck.pk).update(lease_until=timezone.now() - timedelta(minutes=2))
    for n in range(3):
        jobs.submit(kind="noop", input={"n": n}, owner=owner)
    worker_heartbeat_record(name="w-browser@test", started_at=timezone.now())
    # The fast path is off, so every row still waits for the relay (seven jobs, seven rows).
    return {"accepted": Job.objects.count(), "outbox": OutboxEntry.objects.count()}


def _operator() -> User:
    staff = User.objects.create_user(username="operator", password="s3cret-pw", is_staff=True)
    staff.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_job", "view_quarantinerecord", "redrive_quarantinerecord"]
        )
    )
    return staff


def _login(page: Page, base: str, next_url: str) -> None:
    page.goto(f"{base}/admin/login/?next={next_url}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}{next_url}*")


def _text(page: Page, selector: str) -> str:
    return (page.text_content(selector) or "").strip()


def test_ops_page_and_quarantine_admin_show_real_numbers__headless_chromium(
    browser: Browser, live_server: Any, user: Any, settings: Any
) -> None:
    expected = _scene(user, settings)
    _operator()
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1200, "height": 1000})

    _login(page, live_server.url, "/ops/")
    assert _text(page, "#accepted-total") == str(expected["accepted"])
    assert _text(page, "#backlog-queued") == "3"
    assert _text(page, "#backlog-leased") == "1"
    assert _text(page, "#finished-succeeded") == "1"
    assert _text(page, "#open-quarantine") == "2"
    assert _text(page, "#expired-leases") == "1"
    assert _text(page, "#outbox-pending") == str(expected["outbox"]) == "7"
    assert _text(page, "#workers-seen") == "1"
    assert _text(page, "#accepted-hour") == str(expected["accepted"])
    assert _text(page, "#completed-hour") == "1"
    assert page.locator("#throughput-chart g").count() == 60
    assert page.locator("#quarantine tr").count() == 3  # header + two records
    assert "w-browser@test" in _text(page, "#workers")
    page.screenshot(path=str(ARTIFACTS / "ops-page.png"), full_page=True)

    page.click("text=All open quarantine in admin")
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 2
    assert "drill.malformed" in _text(page, "#result_list")
    page.screenshot(path=str(ARTIFACTS / "quarantine-admin.png"), full_page=True)

    # Redrive one record through the admin action, as an operator would.
    page.locator("#result_list tbody tr input.action-select").first.check()
    page.select_option("select[name=action]", "redrive_same_version")
    page.fill("input[name=note]", "parser fixed")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist")
    assert "Redriven: 1 quarantined job(s)." in _text(page, ".messagelist")
    page.screenshot(path=str(ARTIFACTS / "quarantine-redriven.png"), full_page=True)

    page.goto(f"{live_server.url}/ops/")
    assert _text(page, "#open-quarantine") == "1"
    assert _text(page, "#backlog-queued") == "4"
    page.close()

    redriven = QuarantineRecord.objects.get(status="redriven")
    assert (redriven.resolved_by, redriven.resolution_note) == ("operator", "parser fixed")


def test_ops_page_redirects_non_staff_to_login(
    browser: Browser, live_server: Any, user: Any
) -> None:
    page = browser.new_page()
    page.goto(f"{live_server.url}/ops/")
    assert "/admin/login/" in page.url
    page.close()
