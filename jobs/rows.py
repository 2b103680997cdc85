"""A new job's rows as plain values: the one spelling of what accepting a job writes.

`job_values` (the Job's own fields), `NEW_JOB` (what every new job shares), `ACCEPTED_EVENT`
and `accepted_details` (its `accepted` JobEvent) are read by both writers: `job_submit` makes
model instances of them (jobs.submission); `submit_many` writes them column-wise, one INSERT
per table and no model object per row (jobs.bulk). The job's outbox row is
`jobs.dispatch`'s (its queue and body) and `outbox.services`' (its defaults and the fast
path's reservation, `outbox_reserved_until`) for both.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple, TypedDict
from uuid import UUID

from django.contrib.auth.models import User

from . import registry
from .models import Job, StoredObject, Tenant
from .states import JobState


class SubmitRequest(NamedTuple):
    """What `job_submit` is asked: its keywords, in its signature's order (and `job_id`, which
    only `ctx.submit` gives)."""

    kind: str
    input: dict[str, Any]
    owner: User
    tenant: Tenant | None
    business_key: str | None
    input_version: int
    idempotency_key: str | None
    serialization_key: str | None
    input_ref: StoredObject | None
    replay_of: Job | None
    run_after: datetime | None
    priority: int | None = None  # None: the kind's default (`@handler(priority=...)`)
    after: Sequence[UUID] = ()  # the jobs it waits for (jobs.links)
    after_failure: str = "run"  # what a dependency's failure does to it (jobs.links)
    parent: Job | None = None  # the job whose handler submitted it (`ctx.submit`)
    callback_url: str | None = None  # where its end is announced (jobs.callbacks)
    job_id: UUID | None = None  # its id, made beforehand (`ctx.submit` returns it); None: new


class CheckedSubmit(NamedTuple):
    """A request that passed `jobs.submission.job_check`: its kind and its fingerprint."""

    request: SubmitRequest
    spec: registry.KindSpec
    fingerprint: str


class _EventFields(TypedDict):
    from_state: str
    to_state: str
    reason: str


# Every new job's row: queued (its generation, attempt and the rest are the fields' defaults).
NEW_JOB: Final[dict[str, Any]] = {"state": JobState.QUEUED.value}
# Every `accepted` event: no state before, queued after; at the job's generation and attempt.
ACCEPTED_EVENT: Final[_EventFields] = {
    "from_state": "",
    "to_state": JobState.QUEUED.value,
    "reason": "accepted",
}

_new_id = Job._meta.get_field("id").get_default


def first_due(run_after: datetime | None, now: datetime) -> datetime:
    """When a job accepted at `now` is first due: `run_after`, never before now."""
    return now if run_after is None else max(now, run_after)


def job_priority(checked: CheckedSubmit) -> int:
    """The job's priority: the request's, else its kind's default (checked by `job_check`)."""
    priority = checked.request.priority
    return checked.spec.priority if priority is None else priority


def job_values(checked: CheckedSubmit, now: datetime) -> dict[str, Any]:
    """The fields of the job accepted at `now`, by field name (related rows as objects): a new
    id, its kind's version, attempt budget and priority, due at `first_due`, its elapsed budget
    from then. With `NEW_JOB`, a Job(**...) of them is the row `job_submit` writes."""
    request, spec = checked.request, checked.spec
    due = first_due(request.run_after, now)
    policy = spec.policy
    return {
        "id": _new_id() if request.job_id is None else request.job_id,
        "kind": request.kind,
        "kind_version": spec.version,
        "owner": request.owner,
        "tenant": request.tenant,
        "business_key": request.business_key,
        "input_version": request.input_version,
        "idempotency_key": request.idempotency_key,
        "request_fingerprint": checked.fingerprint,
        "input": request.input,
        "input_ref": request.input_ref,
        "serialization_key": request.serialization_key,
        "replay_of": request.replay_of,
        "parent": request.parent,
        "max_attempts": policy.max_attempts,
        "priority": job_priority(checked),
        "callback_url": request.callback_url,
        "next_attempt_at": due,
        "deadline": due + timedelta(seconds=policy.max_elapsed),
    }


def accepted_details(run_after: datetime | None) -> dict[str, Any]:
    """The `details` of a job's `accepted` event: the `run_after` it was asked, if any."""
    return {} if run_after is None else {"run_after": run_after.isoformat()}
