"""The API while its database is unreachable (a failover, a partition): 503 with Retry-After
and our error shape, never a 500 that reads as a bug."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from jobs.models import Job
from tests.chaos.test_database_refused import _through
from tests.harness import Harness
from tests.network.proxy import FaultProxy, fault_proxy
from tests.production_server import PROXY_HEADERS, ProductionServer, production_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def db_proxy(harness: Harness) -> Iterator[FaultProxy]:
    parts = urlsplit(harness.database_url)
    with fault_proxy((parts.hostname or "127.0.0.1", parts.port or 5432)) as proxy:
        yield proxy


@pytest.fixture
def web_via_proxy(
    harness: Harness, production_static: Path, db_proxy: FaultProxy, settings: Any
) -> Iterator[ProductionServer]:
    settings.OUTBOX_FAST_PATH = False
    url = _through(harness.database_url, db_proxy)
    with production_server(harness, production_static, DATABASE_URL=url) as running:
        yield running


def _submit(server: ProductionServer, token: str) -> tuple[int, dict[str, str], Any]:
    conn = server.connection(timeout=30)
    try:
        headers = {
            **PROXY_HEADERS,
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": "while-down-1",
        }
        conn.request("POST", "/api/jobs/", body=json.dumps({"kind": "noop"}), headers=headers)
        response = conn.getresponse()
        answer = {k.lower(): v for k, v in response.getheaders()}
        return response.status, answer, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.timeout(120)
def test_submit_answers_503_with_retry_after__database_refused(
    web_via_proxy: ProductionServer, db_proxy: FaultProxy
) -> None:
    user = User.objects.create_user(username="down", password="pw")
    token = Token.objects.create(user=user).key
    db_proxy.reset()
    db_proxy.refuse()
    status, headers, body = _submit(web_via_proxy, token)
    assert status == 503, body
    assert body["error"]["code"] == "unavailable", body
    assert "Idempotency-Key" in body["error"]["message"]
    assert int(headers["retry-after"]) > 0
    assert not Job.objects.exists()

    db_proxy.pass_through()  # the retry the answer asked for, with the same key
    status, _, body = _submit(web_via_proxy, token)
    assert status == 202, body
    assert Job.objects.count() == 1
