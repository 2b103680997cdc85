"""The drill kinds (`drill.crash` runs os._exit in its worker) are registered only when asked for
(JOBS_HANDLER_MODULES=demo.drill_kinds), and a production process refuses them at start-up:
the public API of a production server does not know them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from jobs.models import Job, Tenant
from tests.harness import Harness, wait_until
from tests.integration.test_production_settings import STRONG_KEY, _manage
from tests.production_server import (
    PROXY_HEADERS,
    ProductionServer,
    production_env,
)

DRILLS = ("drill.crash", "drill.sleep", "drill.malformed", "drill.read_input", "demo.report")
REFUSAL = "are registered with DJANGO_ENV=production"


def _post_job(
    production_web: ProductionServer, token: str, kind: str
) -> tuple[int, dict[str, Any]]:
    conn = production_web.connection()
    try:
        body = json.dumps({"kind": kind, "input": {}})
        headers = {
            **PROXY_HEADERS,
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
        }
        conn.request("POST", "/api/jobs/", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(180)
def test_drill_kinds_are_unknown_kinds__production_server(production_web: ProductionServer) -> None:
    tenant = Tenant.objects.create(name="prod")
    user = User.objects.create_user(username="fuzzer", password="pw")
    tenant.members.add(user)
    token = Token.objects.create(user=user).key
    for kind in DRILLS:
        status, body = _post_job(production_web, token, kind)
        assert status == 400, (kind, body)
        assert body["error"]["code"] == "unknown_kind", (kind, body)
    assert not Job.objects.exists()
    # The same server accepts the example project's own kinds: only the drills are missing.
    status, body = _post_job(production_web, token, "noop")
    assert status == 202, body
    assert list(Job.objects.values_list("kind", flat=True)) == ["noop"]


@pytest.mark.parametrize("modules", ["demo.drill_kinds", "demo.demo_kinds"])
def test_start_up_refused__drill_kinds_named_in_production(modules: str) -> None:
    done = _manage(
        "check",
        DJANGO_ENV="production",
        DJANGO_SECRET_KEY=STRONG_KEY,
        JOBS_HANDLER_MODULES=modules,
    )
    assert done.returncode != 0, done.stdout
    assert REFUSAL in done.stderr and "drill.crash" in done.stderr, done.stderr[-2000:]


@pytest.mark.timeout(120)
def test_worker_refuses_to_start__drill_kinds_named_in_production(
    harness: Harness, tmp_path: Path
) -> None:
    env = production_env(harness.base_env(), tmp_path, JOBS_HANDLER_MODULES="demo.drill_kinds")
    argv = [sys.executable, "-m", "celery", "-A", "jobsite", "worker", "--pool=solo"]
    worker = harness.spawn("worker-prod-drills", argv, env)
    wait_until(lambda: not worker.alive(), timeout=90, what="the worker to refuse")
    assert worker.popen.returncode != 0
    assert REFUSAL in worker.log(), worker.log()[-3000:]
    assert "ready." not in worker.log()


def test_drill_kinds_not_registered__development_settings_without_the_module() -> None:
    done = _manage("shell", "-c", "from jobs import registry; print(','.join(registry.kinds()))")
    assert done.returncode == 0, done.stderr
    kinds = done.stdout.strip().split(",")
    assert "report.generate" in kinds and "noop" in kinds
    assert not [kind for kind in kinds if kind.startswith(("drill.", "demo."))], kinds
