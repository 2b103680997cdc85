"""What a callback says: the job's end as the API shows it, never its input.

`{"type": "job.<event>", "timestamp": <finished_at>, "data": {id, kind, status, ...}}`, the
Standard Webhooks payload shape. The body is a function of the finished job only (a terminal
job is never written again), so every attempt sends the same bytes under the same id.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.urls import NoReverseMatch, reverse

from jobs.models import Job
from jobs.states import CLIENT_STATUS, JobState


def _when(value: datetime | None) -> str | None:
    """A time as the API writes it (DRF: ISO 8601, `Z` for UTC)."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _status_url(job: Job) -> str | None:
    try:
        return reverse("jobs-api:job-detail", args=[job.pk])
    except NoReverseMatch:  # a host project that does not mount the API
        return None


def callback_data(job: Job) -> dict[str, Any]:
    """The `data` of a finished job's callback."""
    state = JobState(job.state)
    error = (
        {"category": job.error_category, "message": job.error_message}
        if job.error_category
        else None
    )
    return {
        "id": str(job.pk),
        "kind": job.kind,
        "status": CLIENT_STATUS[state].value,
        "attempts": job.attempt,
        "input_version": job.input_version,
        "business_key": job.business_key,
        "tenant": job.tenant.name if job.tenant_id is not None and job.tenant else None,
        "created_at": _when(job.created_at),
        "finished_at": _when(job.finished_for_client),
        "result": job.result if state is JobState.SUCCEEDED else None,
        "error": error,
        "status_url": _status_url(job),
    }


def callback_body(job: Job, *, event: str) -> bytes:
    """The request body: compact JSON, keys sorted, so the same job gives the same bytes."""
    payload = {
        "type": f"job.{event}",
        "timestamp": _when(job.finished_for_client),
        "data": callback_data(job),
    }
    return json.dumps(
        payload, cls=DjangoJSONEncoder, sort_keys=True, separators=(",", ":")
    ).encode()
