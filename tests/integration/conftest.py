"""Fixtures of the integration tests: fresh API throttles, the API's usual member, and a
second session holding the xmin horizon."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.core.cache import cache
from django.db import connection

from tests.integration.api_helpers import member


@pytest.fixture(autouse=True)
def _fresh_throttles() -> None:
    """Throttle counters live in the default cache: each test starts with none spent."""
    cache.clear()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    """A member of tenant `acme`."""
    return member(django_user_model, "alice", "acme")


@pytest.fixture
def held_snapshot() -> Iterator[psycopg.Connection[Any]]:
    """A second session in a REPEATABLE READ transaction that has taken its snapshot: it
    holds the xmin horizon until the fixture ends (its rollback), also when the test fails."""
    params = connection.get_connection_params()
    conn = psycopg.connect(
        **{k: v for k, v in params.items() if k in ("dbname", "host", "port", "user")}
    )
    conn.execute("SET application_name = 'held-snapshot'")
    conn.commit()
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    conn.execute("SELECT count(*) FROM jobs_job")
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()
