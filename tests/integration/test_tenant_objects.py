"""Objects a job references belong to its tenant: at submission (API) and again on the worker.

The API refuses another tenant's `input_ref`; a job row is data all the same (a bug, a redrive,
a script), so the worker checks again: `ctx.open_input()` and `ctx.get_for_tenant()` fail the
job permanently (Forbidden) and nothing is read, returned or published.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

import jobs
from documents.models import Document, DocumentIndex, DocumentIndexLog, DocumentRevision
from documents.services import document_create, document_revise
from jobs import registry
from jobs.api.services import object_store
from jobs.context import JobContext
from jobs.models import EffectLedgerEntry, Job, QuarantineRecord, StoredObject, Tenant
from jobs.runtime import Outcome
from outbox.models import OutboxEntry
from tests.harness import Harness, wait_until
from tests.integration.api_helpers import error_code, member, submit, token_client

SECRET = b"customer,amount\nacme,1200\n"


@pytest.fixture
def mallory(django_user_model: Any) -> Any:
    return member(django_user_model, "mallory", "evil")


def _tenant(name: str) -> Tenant:
    return Tenant.objects.get(name=name)


def _stored(owner: Any, tenant: Tenant | None, data: bytes = SECRET) -> StoredObject:
    return object_store(owner=owner, tenant=tenant, upload=SimpleUploadedFile("ledger.csv", data))


def _assert_quarantined_forbidden(job: Job) -> Job:
    job.refresh_from_db()
    assert (job.state, job.error_category, job.attempt) == ("quarantined", "forbidden", 1)
    assert job.result is None
    reason = QuarantineRecord.objects.get(job_id=job.pk).reason
    assert reason.startswith("permanent failure: forbidden: ")
    assert not EffectLedgerEntry.objects.filter(job_id=job.pk).exists()
    return job


# --- /api/objects/ inputs: at submission ------------------------------------------------------


@pytest.mark.django_db
def test_submit_is_404_and_writes_nothing__input_ref_of_another_tenant(
    alice: Any, mallory: Any
) -> None:
    theirs = _stored(alice, _tenant("acme"))
    missing = "00000000-0000-4000-8000-000000000000"
    intruder = token_client(mallory)

    refused = submit(intruder, {"kind": "drill.read_input", "input_ref": str(theirs.pk)})
    absent = submit(intruder, {"kind": "drill.read_input", "input_ref": missing})

    assert (refused.status_code, error_code(refused)) == (404, "not_found")
    assert refused.json() == absent.json()  # existence elsewhere does not show
    assert not Job.objects.exists() and not OutboxEntry.objects.exists()


@pytest.mark.django_db
def test_submit_is_404__input_ref_of_the_users_other_tenant(alice: Any) -> None:
    """A member of two tenants cannot carry one tenant's object into the other's job."""
    _tenant("acme")
    beta = Tenant.objects.create(name="beta")
    beta.members.add(alice)
    acme_object = _stored(alice, _tenant("acme"))

    response = submit(
        token_client(alice),
        {"kind": "drill.read_input", "input_ref": str(acme_object.pk), "tenant": "beta"},
    )

    assert (response.status_code, error_code(response)) == (404, "not_found")
    assert not Job.objects.exists() and not OutboxEntry.objects.exists()


@pytest.mark.django_db
def test_submit_is_404__personal_input_ref_of_another_user(user: Any, other_user: Any) -> None:
    theirs = _stored(user, None)

    response = submit(
        token_client(other_user), {"kind": "drill.read_input", "input_ref": str(theirs.pk)}
    )

    assert (response.status_code, error_code(response)) == (404, "not_found")
    assert not Job.objects.exists() and not OutboxEntry.objects.exists()


# --- /api/objects/ inputs: on the worker (rows made behind the API's back) -----------------


@pytest.mark.django_db
def test_open_input_is_quarantined_forbidden__input_ref_of_another_tenant(
    alice: Any, mallory: Any
) -> None:
    theirs = _stored(alice, _tenant("acme"))
    job = jobs.submit(
        kind="drill.read_input", input={}, owner=mallory, tenant=_tenant("evil"), input_ref=theirs
    )

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    job = _assert_quarantined_forbidden(job)
    assert SECRET.decode() not in job.error_message and str(theirs.pk) not in job.error_message


@pytest.mark.django_db
def test_open_input_is_quarantined_forbidden__personal_input_ref_of_another_user(
    user: Any, other_user: Any
) -> None:
    theirs = _stored(user, None)
    job = jobs.submit(kind="drill.read_input", input={}, owner=other_user, input_ref=theirs)

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    _assert_quarantined_forbidden(job)


@pytest.mark.django_db
def test_open_input_reads__object_another_member_of_the_tenant_uploaded(
    alice: Any, django_user_model: Any
) -> None:
    bob = member(django_user_model, "bob", "acme")
    shared = _stored(alice, _tenant("acme"))
    job = jobs.submit(
        kind="drill.read_input", input={}, owner=bob, tenant=_tenant("acme"), input_ref=shared
    )

    assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED

    job.refresh_from_db()
    assert job.result is not None and job.result["size"] == len(SECRET)


# --- the handler API: ctx.tenant_id, ctx.get_for_tenant() ----------------------------------


@pytest.fixture
def revision_kind() -> Iterator[None]:
    """Loads a revision through a relation: it belongs to its document's tenant."""

    def lookup(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
        revision = ctx.get_for_tenant(
            DocumentRevision,
            input["revision"],
            tenant_field="document__tenant",
            owner_field=input.get("owner_field", "document__owner"),
        )
        return {"tenant": ctx.tenant_id, "revision": revision.pk}

    registry.handler("test.revision_lookup", max_attempts=3)(lookup)
    yield
    registry.unregister("test.revision_lookup")


@pytest.fixture
def acme_revision(alice: Any) -> DocumentRevision:
    doc = document_create(owner=alice, title="plans", tenant=_tenant("acme"))
    return DocumentRevision.objects.create(document=doc, version=1, text="secret")


def _lookup(owner: Any, tenant: Tenant | None, **input: Any) -> Job:
    return jobs.submit(kind="test.revision_lookup", input=input, owner=owner, tenant=tenant)


@pytest.mark.django_db
def test_get_for_tenant_loads__row_of_the_jobs_tenant_through_a_relation(
    revision_kind: None, acme_revision: DocumentRevision, alice: Any
) -> None:
    job = _lookup(alice, _tenant("acme"), revision=acme_revision.pk)

    assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED

    job.refresh_from_db()
    assert job.result == {"tenant": _tenant("acme").pk, "revision": acme_revision.pk}


@pytest.mark.parametrize("revision", ["theirs", "missing", "not-a-number", None])
@pytest.mark.django_db
def test_get_for_tenant_is_forbidden__another_tenants_missing_or_malformed_id(
    revision_kind: None,
    acme_revision: DocumentRevision,
    mallory: Any,
    revision: str | None,
) -> None:
    pk = {"theirs": acme_revision.pk, "missing": acme_revision.pk + 1000}.get(
        revision or "", revision
    )
    job = _lookup(mallory, _tenant("evil"), revision=pk)

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    job = _assert_quarantined_forbidden(job)
    assert job.error_message.endswith("documents.DocumentRevision not found in this job's tenant")


@pytest.mark.django_db
def test_get_for_tenant_is_forbidden__personal_job_and_no_owner_field(
    revision_kind: None, user: Any
) -> None:
    """Without an owner field a row with no tenant is nobody's: a personal job owns nothing."""
    doc = document_create(owner=user, title="diary")
    revision = DocumentRevision.objects.create(document=doc, version=1, text="secret")
    own = _lookup(user, None, revision=revision.pk)
    ownerless = _lookup(user, None, revision=revision.pk, owner_field=None)

    assert jobs.execute(own.pk).outcome is Outcome.SUCCEEDED
    assert jobs.execute(ownerless.pk).outcome is Outcome.QUARANTINED

    _assert_quarantined_forbidden(ownerless)


# --- document.index on a real worker ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_index_job_of_another_tenants_document__real_worker_quarantines_and_publishes_nothing(
    harness: Harness, alice: Any, mallory: Any
) -> None:
    doc = document_create(owner=alice, title="plans", tenant=_tenant("acme"))
    document_revise(document=doc, text="merger codename bluebird", actor=alice)
    # A job row of evil's naming acme's document, whichever way it got past submission.
    decoy = document_create(owner=mallory, title="decoy", tenant=_tenant("evil"))
    job = jobs.submit(
        kind="document.index",
        input={"document_id": decoy.pk},
        owner=mallory,
        tenant=_tenant("evil"),
        input_version=1,
    )
    Job.objects.filter(pk=job.pk).update(input={"document_id": doc.pk})
    client = token_client(mallory)

    worker = harness.start_worker("w-authz")
    wait_until(
        lambda: Job.objects.filter(pk=job.pk, state="quarantined").exists(),
        timeout=90,
        what="the worker to quarantine the cross-tenant index job",
    )

    _assert_quarantined_forbidden(job)
    status = client.get(f"/api/jobs/{job.pk}/").json()
    assert (status["status"], status["error"]["category"]) == ("failed", "forbidden")
    assert client.get(f"/api/jobs/{job.pk}/result/").json()["result"] is None
    # Acme's own job may have run; mallory's never published anything.
    assert not DocumentIndex.objects.filter(document=doc, job_id=job.pk).exists()
    assert not DocumentIndexLog.objects.filter(job_id=job.pk).exists()
    assert Document.objects.get(pk=doc.pk).current_version == 1
    assert "bluebird" not in worker.log()


# --- document.index at submission (the registry's authorize_submit hook) ---------------------


@pytest.mark.django_db
def test_submit_index_job_is_404_and_writes_nothing__document_of_another_tenant(
    alice: Any, mallory: Any
) -> None:
    doc = document_create(owner=alice, title="plans", tenant=_tenant("acme"))
    intruder = token_client(mallory)

    refused = submit(intruder, {"kind": "document.index", "input": {"document_id": doc.pk}})
    absent = submit(intruder, {"kind": "document.index", "input": {"document_id": doc.pk + 99}})

    assert (refused.status_code, error_code(refused)) == (404, "not_found")
    assert refused.json() == absent.json()
    assert not Job.objects.exists() and not OutboxEntry.objects.exists()
    own = submit(token_client(alice), {"kind": "document.index", "input": {"document_id": doc.pk}})
    assert own.status_code == 202
