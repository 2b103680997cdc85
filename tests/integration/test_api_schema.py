"""schemathesis against /api/schema/: no 5xx, and every response matches the schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis import checks as st_checks

from jobs.models import Tenant
from jobsite.wsgi import application

CHECKS = [
    st_checks.not_a_server_error,
    st_checks.status_code_conformance,
    st_checks.content_type_conformance,
    st_checks.response_schema_conformance,
    st_checks.response_headers_conformance,
]


@pytest.fixture(autouse=True)
def _keep_test_connection() -> Iterator[None]:
    """As Django's test Client does: a WSGI request must not close the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture(autouse=True)
def _short_long_polls(settings: Any) -> None:
    settings.JOBS_API_MAX_WAIT_SECONDS = 0.2  # generated ?wait= values must not stall the run


@pytest.fixture
def auth_headers(django_user_model: Any) -> dict[str, str]:
    cache.clear()
    user = django_user_model.objects.create_user(username="fuzzer")
    Tenant.objects.create(name="fuzz").members.add(user)
    token, _ = Token.objects.get_or_create(user=user)
    return {"Authorization": f"Token {token.key}"}


# Loaded at collection from the live WSGI app (the schema view reads no database rows).
# (schemathesis.pytest.from_fixture does not work with pytest 9: it reads Function._nodeid.)
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_conforms_to_its_schema__no_server_errors(
    case: Any, auth_headers: dict[str, str], db: None
) -> None:
    case.call_and_validate(headers=auth_headers, checks=CHECKS)
