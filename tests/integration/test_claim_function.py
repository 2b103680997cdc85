"""The database claim (`jobs_claim_many`, jobs/sql/jobs_claim_many.sql) agrees with the Python
side it serves."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.db import connection, transaction

import jobs
from jobs.admission import admission_lock_keys
from jobs.claims import ClaimStatus, job_claim_id, json_value
from jobs.models import Job, JobEvent

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("tenant_id", "tenant_limit", "kind_limit"),
    [(None, None, None), (7, 2, None), (None, 2, None), (None, None, 3), (7, 2, 3)],
)
def test_claim_lock_keys_are_the_submission_keys_in_the_same_order(
    tenant_id: int | None, tenant_limit: int | None, kind_limit: int | None
) -> None:
    """Claim and hand-over lock the same advisory keys in the same order (no deadlock, no
    missed hand-over); the claim takes no serialization-key lock."""
    spec: Any = SimpleNamespace(tenant_limit=tenant_limit, kind_limit=kind_limit)
    expected = admission_lock_keys(
        kind="report.generate", tenant_id=tenant_id, serialization_key=None, spec=spec
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jobs_claim_lock_keys(%s, %s, %s, %s)",
            ["report.generate", tenant_id, tenant_limit, kind_limit],
        )
        row = cursor.fetchone()
    assert row is not None and list(row[0]) == expected


def test_claim_without_a_kind_hint__asks_again_with_the_stored_kind(user: Any) -> None:
    job = jobs.submit(kind="noop", input={"x": [1, 2]}, owner=user)
    claim = job_claim_id(str(job.pk), worker="w:1:1")  # an old message: no kind, no version
    assert claim.status is ClaimStatus.CLAIMED and claim.lease is not None
    assert claim.input == {"x": [1, 2]}
    assert (claim.lease.kind, claim.lease.generation, claim.lease.attempt) == ("noop", 1, 1)
    trail = list(JobEvent.objects.filter(job=job).values_list("to_state", "generation"))
    assert trail == [("queued", 0), ("leased", 1)]


def test_claim_answers_why_it_did_not_claim(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    first = job_claim_id(job.pk, worker="w:1:1", kind="noop", kind_version=job.kind_version)
    assert first.status is ClaimStatus.CLAIMED
    again = job_claim_id(job.pk, worker="w:2:1", kind="noop", kind_version=job.kind_version)
    assert again.status is ClaimStatus.BUSY and again.lease is None
    Job.objects.filter(pk=job.pk).update(state="succeeded", result={}, finished_at=job.created_at)
    done = job_claim_id(job.pk, worker="w:3:1", kind="noop", kind_version=job.kind_version)
    assert done.status is ClaimStatus.FINISHED
    missing = job_claim_id("00000000-0000-7000-8000-000000000000", worker="w:4:1")
    assert missing.status is ClaimStatus.MISSING


def test_claim_refused_by_the_one_leased_per_key_index__caller_transaction_still_usable(
    user: Any,
) -> None:
    """The partial unique index refuses a second leased job of a key: inside a caller's
    transaction (this test's) that refusal is a WAITING answer, and the transaction goes on."""
    older = jobs.submit(kind="noop", input={"n": 1}, owner=user, serialization_key="doc:9")
    younger = jobs.submit(kind="noop", input={"n": 2}, owner=user, serialization_key="doc:9")
    # The younger job holds the key's lease (as after an operator redrive of the older one).
    Job.objects.filter(pk=younger.pk).update(
        state="leased", generation=1, attempt=1, lease_owner="w:y:1", lease_until=younger.created_at
    )
    claim = job_claim_id(older.pk, worker="w:o:1", kind="noop", kind_version=older.kind_version)
    assert claim.status is ClaimStatus.WAITING and claim.lease is None
    assert Job.objects.get(pk=older.pk).state == "queued"  # the transaction is still usable


def _settings_in_claim_transaction(job_id: Any) -> tuple[str, str]:
    """synchronous_commit and plan_cache_mode right after a one-job claim, in its transaction."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT status FROM jobs_claim_many(ARRAY[%s::uuid], ARRAY['noop'], ARRAY[1], "
            "ARRAY[30.0::float8], 'w:s:1', true, NULL, NULL)",
            [job_id],
        )
        row = cursor.fetchone()
        assert row is not None and row[0] == "claimed"
        cursor.execute(
            "SELECT current_setting('synchronous_commit'), current_setting('plan_cache_mode')"
        )
        settings_row = cursor.fetchone()
    assert settings_row is not None
    return settings_row[0], settings_row[1]


def test_claim_commits_asynchronously_and_plans_generically_inside_only(user: Any) -> None:
    """The function's SET plan_cache_mode (migration 0011) ends with the call; its SET LOCAL
    synchronous_commit = off lasts until the claim's transaction commits."""
    job = jobs.submit(kind="noop", input={}, owner=user)
    with connection.cursor() as cursor:
        cursor.execute("SELECT p.proconfig FROM pg_proc p WHERE p.proname = 'jobs_claim_many'")
        row = cursor.fetchone()
    assert row is not None and row[0] == ["plan_cache_mode=force_generic_plan", "lock_timeout=5000"]

    synchronous_commit, plan_cache_mode = _settings_in_claim_transaction(job.pk)

    assert synchronous_commit == "off"
    assert plan_cache_mode == "auto"


def test_the_previous_releases_call__jobs_claim__claims_through_the_one_claim(user: Any) -> None:
    """A worker of the previous release calls jobs_claim(7 scalars) during a rolling deploy:
    it claims (charged) and answers why not, as before, through jobs_claim_many."""
    job = jobs.submit(kind="noop", input={"n": 7}, owner=user)
    sql = "SELECT * FROM jobs_claim(%s, 'noop', 1, %s, 30, NULL, NULL)"
    with connection.cursor() as cursor:
        cursor.execute(sql, [job.pk, "old:1:1"])
        first = cursor.fetchone()
        cursor.execute(sql, [job.pk, "old:2:1"])
        second = cursor.fetchone()
    assert first is not None and second is not None
    assert first[:3] == ("claimed", 1, 1) and json_value(first[5]) == {"n": 7}
    assert second[0] == "busy" and second[1] is None
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.generation, stored.attempt, stored.lease_owner) == (
        "leased",
        1,
        1,
        "old:1:1",
    )
