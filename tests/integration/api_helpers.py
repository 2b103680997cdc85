"""Shared helpers for the API tests: token clients and users in tenants."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test import Client
from rest_framework.authtoken.models import Token

from jobs.models import Tenant


def token_client(user: Any) -> Client:
    """A test client that authenticates every request with the user's DRF token."""
    token, _ = Token.objects.get_or_create(user=user)
    return Client(HTTP_AUTHORIZATION=f"Token {token.key}")


def member(django_user_model: Any, username: str, tenant_name: str) -> Any:
    user = django_user_model.objects.create_user(username=username, password="pw")
    tenant, _ = Tenant.objects.get_or_create(name=tenant_name)
    tenant.members.add(user)
    return user


def submit(client: Client, body: dict[str, Any], key: str | None = None, **extra: Any) -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post(
        "/api/jobs/",
        data=json.dumps(body),
        content_type="application/json",
        headers=headers,
        **extra,
    )


def error_code(response: Any) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    assert {"code", "message", "details"} <= set(body["error"]), body
    return str(body["error"]["code"])


def long_poll_while(
    client: Client, job_id: str, change: Callable[[], object], *, after: float
) -> tuple[Any, float]:
    """GET the job with `?wait=25` while another thread runs `change` `after` seconds into the
    wait (its own connection, closed after); (the response, seconds the GET took)."""
    started = threading.Event()

    def change_soon() -> None:
        started.wait(10)
        try:
            time.sleep(after)  # let the long-poll begin: the point is that it wakes up early
            change()
        finally:
            connection.close()

    thread = threading.Thread(target=change_soon)
    thread.start()
    began = time.monotonic()
    started.set()
    response = client.get(f"/api/jobs/{job_id}/", {"wait": 25})
    elapsed = time.monotonic() - began
    thread.join(10)
    return response, elapsed
