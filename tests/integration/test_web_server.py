"""The production web server (the Dockerfile's CMD: gunicorn + uvicorn workers, DJANGO_ENV=
production) on 127.0.0.1: long-polls do not hold it, static files and API docs are its own.

The load test is bounded: 40 long-polls of 20 s on jobs that never change, /healthz probed
on a 50 ms schedule for 17 s of that window, every request with a timeout; it ends by itself.
"""

from __future__ import annotations

import re
import threading
import time
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.authtoken.models import Token

import jobs
from jobs.models import Job, Tenant
from jobs.services import job_cancel
from tests.production_server import ProductionServer

pytestmark = pytest.mark.django_db(transaction=True)

LONG_POLLS = 40
WAIT_SECONDS = 20
PROBE_WINDOW = WAIT_SECONDS - 3.0  # from 1 s after the long-polls began: they are all held
PROBE_EVERY = 0.05  # a schedule, not a pause: a slow probe is followed at once by the next
MIN_PROBES = 100
# A server held by its long-polls answers a probe only once one of them ends (20 s); 1 s
# tells that apart from a loaded machine's scheduling (p99 0.37 s, max 0.78 s in CI beside
# the suite's other worker; 0.23 s on a quiet machine).
HEALTHZ_P99_LIMIT = 1.0


def _member(username: str, tenant: Tenant) -> tuple[User, str]:
    user = User.objects.create_user(username=username, password="pw")
    tenant.members.add(user)
    return user, Token.objects.create(user=user).key


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@pytest.mark.timeout(120)
def test_healthz_p99_under_1s__40_long_polls_of_20s(production_web: ProductionServer) -> None:
    tenant = Tenant.objects.create(name="load")
    owner, token = _member("poller", tenant)
    job_ids = [
        str(jobs.submit(kind="noop", input={"n": n}, owner=owner, tenant=tenant).pk)
        for n in range(LONG_POLLS)
    ]
    polls: list[tuple[int, float, str]] = []
    lock = threading.Lock()

    def long_poll(job_id: str) -> None:
        began = time.monotonic()
        status, _, body = production_web.get(
            f"/api/jobs/{job_id}/?wait={WAIT_SECONDS}",
            {"Authorization": f"Token {token}"},
            timeout=WAIT_SECONDS + 30,
        )
        with lock:
            polls.append((status, time.monotonic() - began, body.decode()))

    threads = [threading.Thread(target=long_poll, args=(job_id,)) for job_id in job_ids]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # every long-poll is in

    latencies: list[float] = []
    connections_seen = 0
    next_probe = time.monotonic()
    window_ends = next_probe + PROBE_WINDOW
    while time.monotonic() < window_ends:
        began = time.monotonic()
        status, _, _ = production_web.get("/healthz", timeout=5)
        latencies.append(time.monotonic() - began)
        assert status == 200
        if len(latencies) == MIN_PROBES // 2:  # mid-window: waiting clients hold no connection each
            connections_seen = _connections_to_test_database()
        # On a slower machine the probes themselves take longer: the count in the window
        # depends on the probes' own time only, not on it plus a fixed pause.
        next_probe = max(next_probe + PROBE_EVERY, time.monotonic())  # no catch-up burst
        time.sleep(max(0.0, next_probe - time.monotonic()))
    for thread in threads:
        thread.join(WAIT_SECONDS + 40)

    assert len(polls) == LONG_POLLS
    assert all(status == 200 and '"status":"queued"' in body for status, _, body in polls)
    assert all(WAIT_SECONDS - 0.5 <= took < WAIT_SECONDS + 10 for _, took, _ in polls), polls
    p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    print(f"healthz over {len(latencies)} probes: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    assert p99 < HEALTHZ_P99_LIMIT, f"p50 {p50:.3f}s p99 {p99:.3f}s max {max(latencies):.3f}s"
    # Enough probes for a p99 (a loaded machine makes fewer in the window, each still fast).
    assert len(latencies) >= MIN_PROBES, len(latencies)
    # Two processes with pools of 10 (jobsite.asgi), plus this test's own connections.
    assert connections_seen < LONG_POLLS, connections_seen


def _connections_to_test_database() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


@pytest.mark.timeout(120)
def test_long_poll_rechecks_each_read__change_revoked_member_deleted_token(
    production_web: ProductionServer,
) -> None:
    tenant = Tenant.objects.create(name="acme")
    owner, owner_token = _member("owner", tenant)
    reviewer, reviewer_token = _member("reviewer", tenant)
    job = jobs.submit(kind="noop", input={}, owner=owner, tenant=tenant)
    results: dict[str, tuple[int, float, bytes]] = {}

    def wait_as(name: str, token: str) -> threading.Thread:
        def run() -> None:
            began = time.monotonic()
            status, _, body = production_web.get(
                f"/api/jobs/{job.pk}/?wait=25", {"Authorization": f"Token {token}"}, timeout=60
            )
            results[name] = (status, time.monotonic() - began, body)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    # A member removed from the tenant mid-wait: 404 at the next read, not at the deadline.
    waiting = wait_as("revoked", reviewer_token)
    time.sleep(1.5)
    tenant.members.remove(reviewer)
    waiting.join(30)
    status, took, _ = results["revoked"]
    assert status == 404 and took < 10, results["revoked"]

    # A token deleted mid-wait: 401.
    waiting = wait_as("deleted", owner_token)
    time.sleep(1.5)
    Token.objects.filter(user=owner).delete()
    waiting.join(30)
    status, took, _ = results["deleted"]
    assert status == 401 and took < 10, results["deleted"]

    # A status change answers at once, with the new status.
    fresh = Token.objects.create(user=owner).key
    waiting = wait_as("cancelled", fresh)
    time.sleep(1.5)
    job_cancel(job_id=job.pk, actor="test")
    waiting.join(30)
    status, took, body = results["cancelled"]
    assert status == 200 and b'"status":"cancelled"' in body and took < 10, results["cancelled"]
    assert Job.objects.get(pk=job.pk).state == "cancelled"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in {"src", "href"} and value]


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_api_docs_reference_no_external_host__assets_served_locally(
    production_web: ProductionServer, page: str
) -> None:
    status, headers, body = production_web.get(page)
    assert status == 200, body[:500]
    html = body.decode()
    # No absolute URL anywhere in the page: not in a tag, not in the inline script.
    assert not re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}", html), html
    links = _Links()
    links.feed(html)
    assets = [url for url in links.urls if url.startswith("/static/")]
    assert assets, links.urls
    for url in links.urls:
        assert not urlsplit(url).netloc, url
    for url in assets:
        status, headers, content = production_web.get(url)
        assert status == 200 and content, url
        assert "immutable" in headers.get("cache-control", ""), (url, headers)
    if page == "/api/docs/":
        assert '"validatorUrl": null' in html  # no badge fetched from swagger.io


def test_static_files_served__admin_css_hashed_and_cached(production_web: ProductionServer) -> None:
    status, _, body = production_web.get("/admin/login/")
    assert status == 200
    (css,) = re.findall(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', body.decode())
    status, headers, content = production_web.get(css, {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-type"].startswith("text/css")
    assert headers.get("content-encoding") == "gzip" and content
    assert "max-age=315360000" in headers["cache-control"]
    # Without the proxy's header the app redirects to HTTPS; probes stay on plain HTTP.
    assert _plain_http(production_web, "/admin/login/")[0] == 301
    assert _plain_http(production_web, "/admin/login/")[1].startswith("https://")
    assert _plain_http(production_web, "/healthz") == (200, "")


def _plain_http(production_web: ProductionServer, path: str) -> tuple[int, str]:
    """A request without the proxy's X-Forwarded-Proto: (status, Location)."""
    conn = production_web.connection()
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("Location", "")
    finally:
        conn.close()
