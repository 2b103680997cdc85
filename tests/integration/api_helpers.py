"""Shared helpers for the API tests: token clients and users in tenants."""

from __future__ import annotations

import json
from typing import Any

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
