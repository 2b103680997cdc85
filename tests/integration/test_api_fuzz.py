"""`schemathesis run --checks all` against a live server: the schema is the API's exact contract.

Every check (not only "no 5xx"): a request the schema accepts is accepted, one it refuses is
a 4xx, responses, status codes and headers match the schema, undeclared methods are 405,
credentials are required. Stateful links upload objects and read them back, so
GET /api/objects/{object_id}/ is exercised with real objects, not only as a 404.
Run parameters and what the schema cannot express: tests/integration/schemathesis.toml.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.core.cache import cache
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread

import jobs
from jobs import registry
from jobs.api.services import api_token_issue
from jobs.models import StoredObject, Tenant

CONFIG = Path(__file__).with_name("schemathesis.toml")
SCHEMATHESIS = [sys.executable, "-m", "schemathesis.cli"]  # the CLI of this environment
# One kind without an input schema, one whose input is required, one with numeric bounds: the
# generated requests do not depend on which other kinds this process happens to have imported.
FUZZ_KINDS = ("noop", "report.generate", "document.index")
RUN_TIMEOUT = 240
AFTER_IDS = 30  # jobs made for `after` to name (a drawn list with more distinct ids repeats them)
ROOT = Path(__file__).resolve().parents[2]


class _NoDelayWSGIServer(ThreadedWSGIServer):
    """wsgiref writes headers and body apart: without TCP_NODELAY every answer waits ~40 ms
    for the client's delayed ACK, and the run takes ten times as long."""

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, address


class _LiveServer(LiveServerThread):
    server_class = _NoDelayWSGIServer


@pytest.fixture
def api_server(transactional_db: None) -> Iterator[str]:
    """The project on 127.0.0.1, a free port, the test database (its own connections)."""
    thread = _LiveServer("127.0.0.1", StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait(30)
    if thread.error:
        raise thread.error
    yield f"http://127.0.0.1:{thread.port}"
    thread.terminate()


@pytest.fixture
def fuzz_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = {kind: registry._registry[kind] for kind in FUZZ_KINDS}
    monkeypatch.setattr(registry, "_registry", pinned)


@pytest.fixture
def fuzz_settings(settings: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="django.request")  # hundreds of expected 4xx lines
    cache.clear()
    settings.JOBS_THROTTLE_USER = "off"  # a 429 would be an allowed answer to anything
    settings.JOBS_THROTTLE_TENANT = "off"
    settings.JOBS_API_MAX_WAIT_SECONDS = 0.2  # generated ?wait= values must not stall the run
    # Every callback_url the schema allows is accepted (none is sent: no job here ends).
    secret = "whsec_" + "Zg" * 16 + "=="
    settings.JOBS_CALLBACK_SECRETS = {"fuzz": secret, "": secret}
    settings.JOBS_CALLBACK_ALLOW_HTTP = True


def test_api_matches_its_schema__schemathesis_all_checks(
    api_server: str, fuzz_kinds: None, fuzz_settings: None, tmp_path: Path
) -> None:
    token = api_token_issue(username="fuzzer", tenant_name="fuzz")
    fuzzer = get_user_model().objects.get(username="fuzzer")
    tenant = Tenant.objects.get(name="fuzz")
    # Jobs a body's `after` may name (schemathesis_hooks.map_body): the caller's tenant's.
    existing = [
        str(jobs.submit(kind="noop", input={"n": n}, owner=fuzzer, tenant=tenant).pk)
        for n in range(AFTER_IDS)
    ]
    har = tmp_path / "run.har"
    command = [
        *SCHEMATHESIS,
        "--no-color",
        "--config-file",
        str(CONFIG),
        "run",
        f"{api_server}/api/schema/?format=json",
        "--checks",
        "all",
        "--header",
        f"Authorization: Token {token}",
        "--report",
        "har",
        "--report-har-path",
        str(har),
    ]
    # Its own directory (hypothesis and schemathesis write state there) and no SCHEMATHESIS_*
    # variables of the developer's: only the config file steers the run.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMATHESIS_")}
    env |= {
        "SCHEMATHESIS_HOOKS": "tests.integration.schemathesis_hooks",
        "FUZZ_AFTER_IDS": ",".join(existing),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    }
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    report = run.stdout[-20_000:] + run.stderr[-5_000:]
    assert run.returncode == 0, report
    assert "No issues found" in run.stdout, report

    answered = _answers(har)
    assert answered["POST", "/api/objects/", 201], answered
    assert answered["GET", "/api/objects/{id}/", 200], answered
    assert answered["POST", "/api/jobs/", 202], answered
    assert answered["GET", "/api/jobs/{id}/", 200], answered
    assert StoredObject.objects.filter(owner__username="fuzzer").exists()
    # The hook's real ids were accepted: some accepted job waits for jobs it named.
    assert _accepted_with_after(har), "no 202 for a body naming jobs in `after`"


def _accepted_with_after(har: Path) -> int:
    """POST /api/jobs/ answered 202 whose body named at least one job in `after`."""
    count = 0
    for entry in json.loads(har.read_text())["log"]["entries"]:
        request = entry["request"]
        if request["method"] != "POST" or entry["response"]["status"] != 202:
            continue
        try:
            body = json.loads(request.get("postData", {}).get("text") or "null")
        except ValueError:
            continue
        count += isinstance(body, dict) and bool(body.get("after"))
    return count


UUID_SEGMENT = re.compile(
    r"/[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}/"
)


def _answers(har: Path) -> Counter[tuple[str, str, int]]:
    """(method, path with ids as {id}, status) of every exchange the HAR report recorded."""
    entries = json.loads(har.read_text())["log"]["entries"]
    answered: Counter[tuple[str, str, int]] = Counter()
    for entry in entries:
        path = UUID_SEGMENT.sub("/{id}/", urlsplit(entry["request"]["url"]).path)
        answered[entry["request"]["method"], path, entry["response"]["status"]] += 1
    return answered
