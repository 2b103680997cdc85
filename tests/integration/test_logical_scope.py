"""Business keys are scoped to a tenant (or to the owner of personal jobs)."""

from __future__ import annotations

from typing import Any

import pytest

import jobs
from jobs.exceptions import IdempotencyConflict
from jobs.models import Tenant

pytestmark = pytest.mark.django_db


def test_same_business_key_in_two_tenants__two_jobs_no_conflict(user: Any, other_user: Any) -> None:
    team_a = Tenant.objects.create(name="team-a")
    team_a.members.add(user)
    team_b = Tenant.objects.create(name="team-b")
    team_b.members.add(other_user)
    a = jobs.submit(kind="noop", input={"x": 1}, owner=user, tenant=team_a, business_key="doc:1")
    b = jobs.submit(
        kind="noop", input={"x": 2}, owner=other_user, tenant=team_b, business_key="doc:1"
    )
    assert a.pk != b.pk
    with pytest.raises(IdempotencyConflict):
        jobs.submit(kind="noop", input={"x": 3}, owner=user, tenant=team_a, business_key="doc:1")
    again = jobs.submit(
        kind="noop", input={"x": 1}, owner=user, tenant=team_a, business_key="doc:1"
    )
    assert again.pk == a.pk and again.replayed


def test_personal_business_keys_are_per_owner(user: Any, other_user: Any) -> None:
    mine = jobs.submit(kind="noop", input={}, owner=user, business_key="report:9")
    theirs = jobs.submit(kind="noop", input={}, owner=other_user, business_key="report:9")
    assert mine.pk != theirs.pk
