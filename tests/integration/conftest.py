"""Fixtures of the integration tests: fresh API throttles, and the API's usual member."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache

from tests.integration.api_helpers import member


@pytest.fixture(autouse=True)
def _fresh_throttles() -> None:
    """Throttle counters live in the default cache: each test starts with none spent."""
    cache.clear()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    """A member of tenant `acme`."""
    return member(django_user_model, "alice", "acme")
