"""Input versions, the conditional publish and the tenant check of document.index (in-process,
real Postgres)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction

import jobs
from documents.kinds import index_terms
from documents.models import Document, DocumentIndex, DocumentIndexLog, DocumentRevision
from documents.services import document_create, document_index_publish_if_newer, document_revise
from jobs.claims import job_claim
from jobs.exceptions import Forbidden
from jobs.lifecycle import job_complete
from jobs.models import EffectLedgerEntry, Job, QuarantineRecord, Tenant
from jobs.runtime import Outcome
from outbox.models import OutboxEntry

pytestmark = pytest.mark.django_db


def test_newer_version_supersedes_queued_older_versions(user: Any) -> None:
    doc = document_create(owner=user, title="spec")
    _, v1 = document_revise(document=doc, text="alpha", actor=user)
    _, v2 = document_revise(document=doc, text="alpha beta", actor=user)
    _, v3 = document_revise(document=doc, text="alpha beta gamma", actor=user)
    states = {j.input_version: (j.state, j.error_category) for j in Job.objects.all()}
    assert states == {
        1: ("cancelled", "superseded"),
        2: ("cancelled", "superseded"),
        3: ("queued", ""),
    }
    assert jobs.execute(v1.pk).outcome.value == "duplicate"
    assert jobs.execute(v3.pk).outcome.value == "succeeded"
    index = DocumentIndex.objects.get(document=doc)
    assert (index.version, index.terms) == (3, index_terms("alpha beta gamma"))
    assert v2.events.filter(reason__startswith="superseded by input version").count() == 1


def test_older_completion_never_overwrites_newer_index__out_of_order_finish(user: Any) -> None:
    doc = document_create(owner=user, title="race")
    _, v1 = document_revise(document=doc, text="one", actor=user, serialize=False)
    lease = job_claim(Job.objects.get(pk=v1.pk), worker="slow", lease_seconds=30)
    assert lease is not None  # v1 is running, so v2 does not supersede it
    _, v2 = document_revise(document=doc, text="two two", actor=user, serialize=False)
    assert jobs.execute(v2.pk).outcome.value == "succeeded"

    def late_publish(_key: str) -> dict[str, Any]:
        applied = document_index_publish_if_newer(
            document_id=doc.pk, version=1, terms={"one": 1}, job_id=v1.pk
        )
        return {"published": applied, "version": 1}

    job_complete(lease, result={"late": True}, local_effects=[("publish_index", late_publish)])
    assert DocumentIndex.objects.get(document=doc).version == 2
    log = list(DocumentIndexLog.objects.filter(document=doc).values_list("version", "applied"))
    assert log == [(2, True), (1, False)]
    ledger = EffectLedgerEntry.objects.get(job_id=v1.pk, name="publish_index")
    assert (ledger.state, ledger.local, ledger.outcome) == (
        "applied",
        True,
        {"published": False, "version": 1},
    )


def test_database_refuses_lowering_an_index_version(user: Any) -> None:
    doc = document_create(owner=user, title="guard")
    _, job = document_revise(document=doc, text="x", actor=user)
    jobs.execute(job.pk)
    with (
        pytest.raises(DatabaseError, match="documents_index_version_monotonic"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "UPDATE documents_documentindex SET version = 0 WHERE document_id = %s", [doc.pk]
        )


def test_serialization_key_admits_only_the_head__later_jobs_wait_for_handover(user: Any) -> None:
    from outbox.models import OutboxEntry

    first = jobs.submit(kind="noop", input={"n": 1}, owner=user, serialization_key="conv:7")
    second = jobs.submit(kind="noop", input={"n": 2}, owner=user, serialization_key="conv:7")
    other = jobs.submit(kind="noop", input={"n": 3}, owner=user, serialization_key="conv:8")
    assert OutboxEntry.objects.filter(job_id=first.pk).count() == 1
    assert OutboxEntry.objects.filter(job_id=second.pk).count() == 0  # waits its turn
    assert OutboxEntry.objects.filter(job_id=other.pk).count() == 1  # other keys run in parallel
    assert jobs.execute(second.pk).outcome.value == "deferred"  # an early message cannot jump
    assert jobs.execute(first.pk).outcome.value == "succeeded"
    assert OutboxEntry.objects.filter(job_id=second.pk).count() == 1  # handed over on completion
    assert jobs.execute(second.pk).outcome.value == "succeeded"


def test_keyed_completion__hands_over_in_the_completions_one_statement(user: Any) -> None:
    """jobs_complete_many and jobs_admission_lock go in one statement (jobs.lifecycle)
    inside the completion's transaction; the next job of the key gets its message with it."""
    from django.test.utils import CaptureQueriesContext

    from outbox.models import OutboxEntry

    first = jobs.submit(kind="noop", input={"n": 1}, owner=user, serialization_key="conv:9")
    second = jobs.submit(kind="noop", input={"n": 2}, owner=user, serialization_key="conv:9")
    lease = job_claim(Job.objects.get(pk=first.pk), worker="w:k:1", lease_seconds=30)
    assert lease is not None

    with CaptureQueriesContext(connection) as queries:
        job_complete(lease, result={"ok": True}, local_effects=[])

    calls = [q["sql"] for q in queries.captured_queries if "jobs_" in q["sql"]]
    assert len(calls) == 1
    assert "jobs_complete_many(" in calls[0] and "jobs_admission_lock(" in calls[0]
    assert Job.objects.get(pk=first.pk).state == "succeeded"
    assert OutboxEntry.objects.filter(job_id=second.pk).count() == 1  # handed over


def test_keyed_completion_with_a_lost_lease__hands_nothing_over(user: Any) -> None:
    from jobs.exceptions import LeaseLost
    from outbox.models import OutboxEntry

    first = jobs.submit(kind="noop", input={"n": 1}, owner=user, serialization_key="conv:10")
    second = jobs.submit(kind="noop", input={"n": 2}, owner=user, serialization_key="conv:10")
    lease = job_claim(Job.objects.get(pk=first.pk), worker="w:k:2", lease_seconds=30)
    assert lease is not None
    Job.objects.filter(pk=first.pk).update(lease_owner="someone-else")  # taken over

    with pytest.raises(LeaseLost):
        job_complete(lease, result={"ok": True}, local_effects=[])

    assert Job.objects.get(pk=first.pk).state == "leased"
    assert OutboxEntry.objects.filter(job_id=second.pk).count() == 0


# --- objects a job references belong to its tenant (issue 14) --------------------------------

SECRET_TEXT = "merger merger merger codename bluebird"


def _member(django_user_model: Any, username: str, tenant_name: str) -> Any:
    user = django_user_model.objects.create_user(username=username, password="pw")
    tenant, _ = Tenant.objects.get_or_create(name=tenant_name)
    tenant.members.add(user)
    return user


@pytest.fixture
def acme_doc(django_user_model: Any) -> Document:
    """Acme's document: v1 indexed, v2 written but not indexed yet (a publish would show)."""
    alice = _member(django_user_model, "alice", "acme")
    doc = document_create(owner=alice, title="plans", tenant=Tenant.objects.get(name="acme"))
    _, v1 = document_revise(document=doc, text="public notes", actor=alice, serialize=False)
    assert jobs.execute(v1.pk).outcome is Outcome.SUCCEEDED
    DocumentRevision.objects.create(document=doc, version=2, text=SECRET_TEXT)
    Document.objects.filter(pk=doc.pk).update(current_version=2)
    return doc


def _index_job(owner: Any, tenant: Tenant | None, document_id: int, version: int = 2) -> Job:
    """A job row naming `document_id`, rewritten behind the submit path's back: a row is data."""
    own = document_create(owner=owner, title="decoy", tenant=tenant)
    job = jobs.submit(
        kind="document.index",
        input={"document_id": own.pk},
        owner=owner,
        tenant=tenant,
        input_version=version,
    )
    Job.objects.filter(pk=job.pk).update(input={"document_id": document_id})
    return job


def _assert_quarantined_forbidden(job: Job) -> Job:
    job.refresh_from_db()
    assert (job.state, job.error_category, job.attempt) == ("quarantined", "forbidden", 1)
    assert job.result is None
    reason = QuarantineRecord.objects.get(job_id=job.pk).reason
    assert reason.startswith("permanent failure: forbidden: ")
    assert not EffectLedgerEntry.objects.filter(job_id=job.pk).exists()
    assert not DocumentIndexLog.objects.filter(job_id=job.pk).exists()
    return job


def test_index_job_is_quarantined_forbidden__document_of_another_tenant(
    acme_doc: Document, django_user_model: Any
) -> None:
    before = DocumentIndex.objects.values().get(document=acme_doc)
    mallory = _member(django_user_model, "mallory", "evil")
    job = _index_job(mallory, Tenant.objects.get(name="evil"), acme_doc.pk)

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    job = _assert_quarantined_forbidden(job)
    assert DocumentIndex.objects.values().get(document=acme_doc) == before  # nothing published
    assert "bluebird" not in job.error_message and "merger" not in job.error_message
    assert str(acme_doc.pk) not in job.error_message
    assert jobs.execute(job.pk).outcome is Outcome.DUPLICATE  # permanent: never run again


def test_index_job_fails_alike__missing_document_and_another_tenants(
    acme_doc: Document, django_user_model: Any
) -> None:
    mallory = _member(django_user_model, "mallory", "evil")
    evil = Tenant.objects.get(name="evil")
    theirs = _index_job(mallory, evil, acme_doc.pk)
    missing = _index_job(mallory, evil, acme_doc.pk + 1000)

    assert jobs.execute(theirs.pk).outcome is Outcome.QUARANTINED
    assert jobs.execute(missing.pk).outcome is Outcome.QUARANTINED

    theirs, missing = _assert_quarantined_forbidden(theirs), _assert_quarantined_forbidden(missing)
    assert theirs.error_message == missing.error_message  # existence elsewhere does not show


def test_index_job_is_quarantined_forbidden__personal_document_of_another_user(
    user: Any, other_user: Any
) -> None:
    doc = document_create(owner=user, title="diary")
    DocumentRevision.objects.create(document=doc, version=1, text=SECRET_TEXT)
    job = _index_job(other_user, None, doc.pk, version=1)

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    _assert_quarantined_forbidden(job)
    assert not DocumentIndex.objects.filter(document=doc).exists()


def test_index_job_is_quarantined_forbidden__submitter_left_the_documents_tenant(
    acme_doc: Document, django_user_model: Any
) -> None:
    bob = _member(django_user_model, "bob", "acme")
    _, job = document_revise(document=acme_doc, text="bob's edit", actor=bob)
    Tenant.objects.get(name="acme").members.remove(bob)

    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED

    _assert_quarantined_forbidden(job)
    assert DocumentIndex.objects.get(document=acme_doc).version == 1


def test_index_job_publishes__document_of_the_jobs_tenant_revised_by_another_member(
    acme_doc: Document, django_user_model: Any
) -> None:
    bob = _member(django_user_model, "bob", "acme")
    _, job = document_revise(document=acme_doc, text="alpha beta", actor=bob)

    assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED

    index = DocumentIndex.objects.get(document=acme_doc)
    assert (index.version, index.terms, index.job_id) == (3, index_terms("alpha beta"), job.pk)


def test_revise_is_forbidden_and_writes_nothing__actor_outside_the_documents_tenant(
    acme_doc: Document, django_user_model: Any
) -> None:
    mallory = _member(django_user_model, "mallory", "evil")
    jobs_before, outbox_before = Job.objects.count(), OutboxEntry.objects.count()

    with pytest.raises(Forbidden):
        document_revise(document=acme_doc, text="defaced", actor=mallory)

    acme_doc.refresh_from_db()
    assert acme_doc.current_version == 2
    assert not acme_doc.revisions.filter(text="defaced").exists()
    assert (Job.objects.count(), OutboxEntry.objects.count()) == (jobs_before, outbox_before)


def test_revise_is_forbidden__personal_document_of_another_user(user: Any, other_user: Any) -> None:
    doc = document_create(owner=user, title="diary")

    with pytest.raises(Forbidden):
        document_revise(document=doc, text="x", actor=other_user)

    assert not Job.objects.exists() and not doc.revisions.exists()
