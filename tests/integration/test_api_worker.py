"""API with a real worker: upload -> job -> result, and the seed's revoked reviewer."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from demo.api_drill_kinds import signal_name
from jobs.models import Job, JobEvent, QuarantineRecord, Tenant
from outbox.models import OutboxEntry
from tests.harness import Harness, wait_until
from tests.integration.api_helpers import error_code, member, submit, token_client

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = b"customer,amount\nacme,1200\n"


def _upload(client: Any, data: bytes) -> str:
    response = client.post("/api/objects/", {"file": SimpleUploadedFile("ledger.csv", data)})
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def _status(client: Any, job_id: str, wait: float = 0) -> str:
    response = client.get(f"/api/jobs/{job_id}/", {"wait": wait} if wait else {})
    if response.status_code == 404:
        return "not visible"
    return str(response.json()["status"])


def test_upload_job_result_round_trip__worker_reads_object_via_open_input(
    harness: Harness, django_user_model: Any
) -> None:
    alice = member(django_user_model, "alice", "acme")
    reviewer = member(django_user_model, "reviewer", "acme")
    client = token_client(alice)
    object_id = _upload(client, SECRET)
    accepted = submit(client, {"kind": "drill.read_input", "input_ref": object_id}, key="rt-1")
    assert accepted.status_code == 202
    job_id = accepted.json()["id"]
    # The broker message and the job row name the object; its bytes travel nowhere.
    entry = OutboxEntry.objects.get(job_id=job_id)
    assert SECRET.decode() not in str(entry.kwargs)
    assert SECRET.decode() not in str(Job.objects.get(pk=job_id).input)

    harness.start_worker("w-api")
    wait_until(
        lambda: _status(client, job_id, wait=5) == "succeeded",
        timeout=90,
        what="the upload job to succeed on the real worker",
    )
    result = client.get(f"/api/jobs/{job_id}/result/")
    assert result.status_code == 200
    assert result.json()["result"] == {
        "read": True,
        "size": len(SECRET),
        "sha256": hashlib.sha256(SECRET).hexdigest(),
    }
    # Release follows current authorization: the reviewer reads it, loses access, gets 404.
    reviewer_client = token_client(reviewer)
    assert reviewer_client.get(f"/api/jobs/{job_id}/result/").status_code == 200
    Tenant.objects.get(name="acme").members.remove(reviewer)
    revoked = reviewer_client.get(f"/api/jobs/{job_id}/result/")
    assert revoked.status_code == 404 and error_code(revoked) == "not_found"
    assert client.get(f"/api/jobs/{job_id}/result/").status_code == 200


def test_revoked_reviewer_loses_job_during_run__worker_quarantines_forbidden(
    harness: Harness, django_user_model: Any
) -> None:
    """Seed 004: revoke the reviewer during a long job; release follows current authorization."""
    reviewer = member(django_user_model, "reviewer", "acme")
    lead = member(django_user_model, "lead", "acme")
    reviewer_client, lead_client = token_client(reviewer), token_client(lead)
    object_id = _upload(reviewer_client, SECRET)
    job_id = submit(
        reviewer_client,
        {
            "kind": "drill.read_input",
            "input_ref": object_id,
            "input": {"wait_for_signal": True, "max_wait": 120},
        },
    ).json()["id"]
    worker = harness.start_worker("w-revoke")
    wait_until(
        lambda: _status(reviewer_client, job_id, wait=5) == "running",
        timeout=90,
        what="the job to be running on the worker",
    )

    Tenant.objects.get(name="acme").members.remove(reviewer)
    for path in (f"/api/jobs/{job_id}/", f"/api/jobs/{job_id}/result/"):
        response = reviewer_client.get(path)
        assert response.status_code == 404, path
    assert reviewer_client.get("/api/jobs/").json()["results"] == []
    assert _status(lead_client, job_id) == "running"

    default_storage.save(signal_name(job_id), ContentFile(b"go"))
    wait_until(
        lambda: _status(lead_client, job_id, wait=5) == "failed",
        timeout=90,
        what="the worker to fail the job on its access re-check",
    )
    job = Job.objects.get(pk=job_id)
    assert job.state == "quarantined"
    assert job.attempt == 1 and job.generation == 1  # permanent: never retried
    assert "Forbidden" in job.error_message
    record = QuarantineRecord.objects.get(job_id=job_id)
    assert record.reason.startswith("permanent failure: forbidden: ")
    assert not JobEvent.objects.filter(job_id=job_id, to_state="retry_wait").exists()
    status = lead_client.get(f"/api/jobs/{job_id}/").json()
    assert status["error"]["category"] == "forbidden"  # a revoked grant, named as such
    result = lead_client.get(f"/api/jobs/{job_id}/result/").json()
    assert result["result"] is None  # nothing private was read or released
    assert SECRET.decode() not in worker.log()
