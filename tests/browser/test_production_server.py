"""The admin and the API docs in Chromium, served by the production web server (the
Dockerfile's CMD and ENV, over HTTPS with a throw-away certificate): the admin is styled by
stylesheets the server itself sends, a job's page shows its ledger, and /api/docs/ and
/api/redoc/ render with every request to 127.0.0.1 (anything else is refused and recorded).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Browser, BrowserContext, Page, Response, Route

import jobs
from jobs.models import EffectLedgerEntry, QuarantineRecord
from jobs.runtime import Outcome, execute
from tests.browser import test_ops_page
from tests.harness import Harness
from tests.production_server import ProductionServer, production_server

pytestmark = pytest.mark.django_db(transaction=True)

browser = test_ops_page.browser  # the fixture: Debian's Chromium through Playwright
ARTIFACTS = test_ops_page.ARTIFACTS

UNSTYLED = "rgba(0, 0, 0, 0)"


@pytest.fixture
def server(harness: Harness, production_static: Path, settings: Any) -> Iterator[ProductionServer]:
    settings.OUTBOX_FAST_PATH = False
    with production_server(harness, production_static, tls=True) as running:
        yield running


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    # The certificate is the test's own; everything else about HTTPS is real (Secure cookies,
    # HSTS, CSRF's referer check).
    ctx = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 900})
    try:
        yield ctx
    finally:
        ctx.close()


def _offline(page: Page) -> list[str]:
    """Refuse (and record) every request that would leave 127.0.0.1."""
    refused: list[str] = []

    def route(route: Route) -> None:
        if urlsplit(route.request.url).hostname in {"127.0.0.1", None}:
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", route)
    return refused


def _operator() -> None:
    staff = User.objects.create_user(username="operator", password="s3cret-pw", is_staff=True)
    codenames = ["view_job", "view_jobevent", "view_effectledgerentry", "view_quarantinerecord"]
    staff.user_permissions.add(*Permission.objects.filter(codename__in=codenames))


def _job_with_ledger(owner: Any) -> str:
    """A real quarantined job plus the ledger row of an external effect it applied."""
    job = jobs.submit(kind="drill.malformed", input={"document_id": "x-ledger"}, owner=owner)
    assert execute(job.pk).outcome is Outcome.QUARANTINED
    record = QuarantineRecord.objects.get(job=job)
    EffectLedgerEntry.objects.create(
        job_id=job.pk,
        input_version=1,
        name="completion_notice",
        idempotency_key="ledger-key-browser-1",
        state="applied",
        generation=1,
        calls=1,
        applied_at=record.created_at,
    )
    return str(job.pk)


def _background(page: Page, selector: str) -> str:
    return str(page.eval_on_selector(selector, "e => getComputedStyle(e).backgroundColor"))


def test_admin_is_styled_and_job_page_shows_ledger__production_server(
    server: ProductionServer, context: BrowserContext, user: Any
) -> None:
    _operator()
    job_id = _job_with_ledger(user)
    page = context.new_page()
    refused = _offline(page)
    stylesheets: list[Response] = []
    page.on(
        "response",
        lambda r: stylesheets.append(r) if r.request.resource_type == "stylesheet" else None,
    )

    page.goto(f"{server.url}/admin/login/?next=/admin/")
    assert _background(page, "#header") != UNSTYLED
    page.fill("#id_username", "operator")
    page.fill("#id_password", "s3cret-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{server.url}/admin/")

    base_css = [r for r in stylesheets if "/static/admin/css/base." in r.url]
    assert base_css, [r.url for r in stylesheets]
    assert all(r.status == 200 for r in stylesheets), [(r.url, r.status) for r in stylesheets]
    assert base_css[0].headers["content-type"].startswith("text/css")
    assert int(base_css[0].headers.get("content-length", "1")) > 0
    session = [c for c in context.cookies() if c["name"] == "sessionid"]
    assert session and session[0]["secure"] and session[0]["httpOnly"]
    assert _background(page, "#header") != UNSTYLED
    assert "Jobs" in (page.text_content("#content-main") or "")

    page.goto(f"{server.url}/admin/jobs/job/{job_id}/change/")
    ledger = page.locator("text=ledger-key-browser-1")
    assert ledger.count() >= 1 and ledger.first.is_visible()
    assert "completion_notice" in (page.text_content("#content-main") or "")
    assert page.eval_on_selector(".inline-group", "e => getComputedStyle(e).display") != "inline"
    page.screenshot(path=str(ARTIFACTS / "production-job-ledger.png"), full_page=True)
    assert refused == []
    page.close()


def test_api_docs_render_without_internet__swagger_ui_and_redoc(
    server: ProductionServer, context: BrowserContext
) -> None:
    page = context.new_page()
    refused = _offline(page)

    page.goto(f"{server.url}/api/docs/")
    page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert "durable-jobs API" in (page.text_content(".swagger-ui .info .title") or "")
    page.wait_for_selector(".opblock-summary-path >> text=/api/jobs/{job_id}/")
    page.screenshot(path=str(ARTIFACTS / "api-docs-offline.png"))

    page.goto(f"{server.url}/api/redoc/")
    page.wait_for_selector("text=Accept work with 202", timeout=30_000)
    assert "durable-jobs API" in (page.text_content("h1") or "")
    page.screenshot(path=str(ARTIFACTS / "api-redoc-offline.png"))
    assert refused == [], refused
    page.close()


def test_redoc_asks_nothing_of_another_host__no_console_error(
    server: ProductionServer, context: BrowserContext
) -> None:
    page = context.new_page()
    refused = _offline(page)
    requested: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    page.goto(f"{server.url}/api/redoc/")
    # The sidebar's last line, where ReDoc puts its attribution and the Redocly logo.
    page.wait_for_selector("text=API docs by Redocly", timeout=30_000)
    page.wait_for_load_state("networkidle")

    off_site = [u for u in requested if urlsplit(u).hostname not in {"127.0.0.1", None}]
    assert off_site == [] and refused == [], off_site + refused
    assert errors == [], errors
    page.close()
