"""Accepting a job: its rows (Job, `accepted` event, outbox entry) written together by the
cheapest strategy its rules allow, or the job it repeats (idempotency key, logical job).

`job_submit` checks the request (`job_check`), makes its rows (`_job_new`: model instances of
the values jobs.rows spells for both writers, this and jobs.bulk), looks for the job this
request repeats, then writes: a plain job in one statement; a serialization key and no other
rule in one statement that also decides admission (`admission.insert_admitted`); a business
key (older input versions to supersede), other admission rules, or a caller's own
transaction in one transaction. A unique index lost to a concurrent submit of the same key
turns into that job's replay.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from outbox.fastpath import writing
from outbox.services import outbox_after_commit

from . import accept_group, admission, dispatch, links, registry, tracing
from .callbacks.services import callback_check
from .conf import jobs_settings
from .events import job_event_new, job_event_record
from .exceptions import IdempotencyConflict, InputTooLarge
from .inserts import insert_together
from .models import Job, JobEvent, StoredObject, Tenant
from .nesting import input_depth_check
from .plans import in_states
from .rows import (
    ACCEPTED_EVENT,
    NEW_JOB,
    CheckedSubmit,
    SubmitRequest,
    accepted_details,
    job_values,
)
from .selectors import logical_scope
from .states import CLAIMABLE, JobState

logger = logging.getLogger(__name__)


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def job_request_fingerprint(
    *,
    kind: str,
    input: Any,
    business_key: str | None,
    input_version: int,
    serialization_key: str | None,
    input_ref: UUID | None,
    tenant_id: int | None,
    after: Sequence[UUID] = (),
    callback_url: str | None = None,
) -> str:
    """What makes two submissions 'the same request' for idempotency (`after` and
    `callback_url` only when given: the fingerprints of requests without them stay what they
    were)."""
    body: dict[str, Any] = {
        "kind": kind,
        "input": input,
        "business_key": business_key,
        "input_version": input_version,
        "serialization_key": serialization_key,
        "input_ref": str(input_ref) if input_ref else None,
        "tenant": tenant_id,
    }
    if after:
        body["after"] = sorted(str(pk) for pk in after)
    if callback_url is not None:
        body["callback_url"] = callback_url
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


def _existing_for_replay(request: SubmitRequest) -> Job | None:
    """The job this request repeats: the owner's job of its idempotency key, else the job of
    its business key and input version (in its logical scope), else None."""
    owner, tenant = request.owner, request.tenant
    if request.idempotency_key:
        found = Job.objects.filter(owner=owner, idempotency_key=request.idempotency_key).first()
        if found is not None:
            return found
    if request.business_key:
        scope = logical_scope(owner_id=owner.pk, tenant_id=tenant.pk if tenant else None)
        return (
            Job.objects.filter(scope)
            .filter(
                kind=request.kind,
                business_key=request.business_key,
                input_version=request.input_version,
            )
            .first()
        )
    return None


def _check_replay(existing: Job, fingerprint: str) -> Job:
    if existing.request_fingerprint != fingerprint:
        if existing.idempotency_key:
            raise IdempotencyConflict(
                "this Idempotency-Key was already used with a different request body; "
                "use a new key for a new request"
            )
        raise IdempotencyConflict(
            "a job for this kind, business_key and input_version already exists with a "
            "different request; submit a new input_version to change it"
        )
    existing.replayed = True
    return existing


def _supersede_older_versions(job: Job) -> None:
    """A newer input version makes queued older versions of one business key pointless."""
    if not job.business_key:
        return
    now = timezone.now()
    older = list(
        Job.objects.select_for_update(skip_locked=True)
        .filter(logical_scope(owner_id=job.owner_id, tenant_id=job.tenant_id))
        .filter(
            kind=job.kind,
            business_key=job.business_key,
            input_version__lt=job.input_version,
            state__in=[s.value for s in (*CLAIMABLE, JobState.WAITING)],
        )
    )
    for old in older:
        updated = in_states(Job.objects.filter(pk=old.pk), [old.state]).update(
            state=JobState.CANCELLED.value,
            finished_at=now,
            error_category="superseded",
            error_message=f"superseded by input version {job.input_version} ({job.pk})",
            updated_at=now,
        )
        if updated:
            job_event_record(
                old,
                from_state=old.state,
                to_state=JobState.CANCELLED.value,
                reason=f"superseded by input version {job.input_version}",
                details={"superseded_by": str(job.pk)},
            )


@dataclass(frozen=True)
class NewJob:
    """A checked submission, not saved yet: the job, its `accepted` event, and more."""

    checked: CheckedSubmit
    job: Job
    accepted: JobEvent
    later: datetime | None  # the outbox row's due time; None: now (fast path)
    keys: list[str]  # admission locks to take (serialization key, caps)


def job_check(request: SubmitRequest) -> CheckedSubmit:
    """Check a submission (size, schema, tenant of referenced rows): with its kind and
    fingerprint."""
    spec = registry.kind_latest(request.kind)
    if request.priority is not None:
        registry.priority_check(request.priority)
    if request.after or request.after_failure != "run":
        request = request._replace(after=links.after_check(request.after, request.after_failure))
    try:
        encoded: bytes | None = _canonical(request.input).encode()
    except RecursionError:  # json's own bound, far beyond JOBS_MAX_INPUT_DEPTH
        encoded = None
    encoded = input_depth_check(encoded)
    if len(encoded) > jobs_settings.MAX_INPUT_BYTES:
        raise InputTooLarge(
            f"input is {len(encoded)} bytes, over JOBS_MAX_INPUT_BYTES="
            f"{jobs_settings.MAX_INPUT_BYTES}; upload it and pass an object reference"
        )
    spec.validate(request.input)
    tenant = request.tenant
    if request.callback_url is not None:
        callback_check(request.callback_url, tenant=tenant)
    if spec.authorize_submit is not None:
        # Ids in the input must name rows of the job's tenant: Forbidden, a 404 through the API.
        spec.authorize_submit(owner=request.owner, tenant=tenant, input=request.input)
    fingerprint = job_request_fingerprint(
        kind=request.kind,
        input=request.input,
        business_key=request.business_key,
        input_version=request.input_version,
        serialization_key=request.serialization_key,
        input_ref=request.input_ref.pk if request.input_ref else None,
        tenant_id=tenant.pk if tenant else None,
        after=request.after,
        callback_url=request.callback_url,
    )
    return CheckedSubmit(request, spec, fingerprint)


def job_lock_keys(checked: CheckedSubmit) -> list[str]:
    """The admission locks a checked submission takes (none: a plain one)."""
    request = checked.request
    return admission.admission_lock_keys(
        kind=request.kind,
        tenant_id=request.tenant.pk if request.tenant else None,
        serialization_key=request.serialization_key,
        spec=checked.spec,
    )


def _job_new(checked: CheckedSubmit) -> NewJob:
    """The rows of a checked submission (jobs.rows), as model instances."""
    now = timezone.now()
    values = job_values(checked, now)
    job = Job(**NEW_JOB, **values)
    to_state = ACCEPTED_EVENT["to_state"]
    if checked.request.after:  # fan-in: waiting until its dependencies end (jobs.links)
        job.state = to_state = JobState.WAITING.value
        job.waiting_for = len(checked.request.after)
    tracing.job_trace_begin(job)
    accepted = job_event_new(
        job,
        from_state=ACCEPTED_EVENT["from_state"],
        to_state=to_state,
        reason=ACCEPTED_EVENT["reason"],
        details=accepted_details(checked.request.run_after),
    )
    due: datetime = values["next_attempt_at"]
    return NewJob(checked, job, accepted, due if due > now else None, job_lock_keys(checked))


@writing()  # company for the fast path's publisher: rows of concurrent submits share messages
def job_submit(
    *,
    kind: str,
    input: dict[str, Any],
    owner: User,
    tenant: Tenant | None = None,
    business_key: str | None = None,
    input_version: int = 1,
    idempotency_key: str | None = None,
    serialization_key: str | None = None,
    input_ref: StoredObject | None = None,
    replay_of: Job | None = None,
    run_after: datetime | None = None,
    priority: int | None = None,
    after: Sequence[UUID] = (),
    after_failure: str = "run",
    parent: Job | None = None,
    callback_url: str | None = None,
) -> Job:
    """Accept a job: Job + JobEvent + OutboxEntry commit together (or with the caller's data).

    A replay (same idempotency key per owner, or the same kind/business_key/input_version)
    returns the existing job with `replayed=True`; the same key with a different request
    raises IdempotencyConflict. `run_after` defers the first attempt (its message is due then;
    the elapsed budget starts then). `priority` (-100..100, higher runs first; None: the
    kind's `@handler(priority=...)`) orders due work (docs/architecture.md, "Priorities");
    it is not part of the request's identity: a replay returns the job at its own priority.
    `after` (job ids of the job's tenant, or of the owner's personal jobs) makes it wait until
    every one of them ended; `after_failure` ("run" or "cancel") says what a dependency that
    failed or was cancelled does to it (jobs.links). `parent` is set by `ctx.submit`.
    `callback_url` (jobs.callbacks) receives a signed POST once the job ends; an unsafe URL,
    or a tenant without a signing secret, raises InvalidCallbackUrl.
    """
    request = SubmitRequest(
        kind,
        input,
        owner,
        tenant,
        business_key,
        input_version,
        idempotency_key,
        serialization_key,
        input_ref,
        replay_of,
        run_after,
        priority,
        after,
        after_failure,
        parent,
        callback_url,
    )
    return job_submit_checked(job_check(request))


def job_submit_checked(checked: CheckedSubmit) -> Job:
    """`job_submit` of a request `job_check` passed: its replay, else its rows (a plain one
    outside a transaction maybe in one commit with concurrent submits: jobs.accept_group)."""
    if accept_group.groupable() and job_is_plain(checked):
        return accept_group.accept_plain(checked, _submit_alone)
    return _submit_alone(checked)


def job_is_plain(checked: CheckedSubmit) -> bool:
    """Nothing to look up or decide for this request: no idempotency key, business key,
    dependency or admission rule. Its rows can be written column-wise with others'."""
    request = checked.request
    if request.idempotency_key or request.business_key or request.after:
        return False
    return not job_lock_keys(checked)


def _submit_alone(checked: CheckedSubmit) -> Job:
    new = _job_new(checked)
    replayed = _replayed(new)
    if replayed is not None:
        return replayed
    try:
        _insert_new(new)
    except IntegrityError:
        # A concurrent submit of the same key or logical job won the unique index.
        replayed = _replayed(new)
        if replayed is None:
            raise
        return replayed
    new.job.replayed = False
    return new.job


def _replayed(new: NewJob) -> Job | None:
    """The job this submit repeats (`_existing_for_replay`), checked against its request."""
    existing = _existing_for_replay(new.checked.request)
    return None if existing is None else _check_replay(existing, new.checked.fingerprint)


def _insert_new(new: NewJob) -> None:
    """Write the new job's rows by the cheapest strategy its rules allow."""
    serialization_key = new.checked.request.serialization_key
    business_key = new.checked.request.business_key
    if new.checked.request.after:
        with transaction.atomic():
            _insert_waiting(new)
    elif (
        serialization_key
        and not business_key
        and not connection.in_atomic_block
        and new.keys == [admission.serial_lock_key(serialization_key)]
    ):
        _insert_keyed(new, serialization_key)
    elif business_key or new.keys or connection.in_atomic_block:
        # Older versions to supersede, admission rules to check under their locks, or the
        # caller's own rows: one transaction.
        with transaction.atomic():
            if business_key:
                _insert_superseding(new)
            else:
                _insert_under_admission(new)
    else:
        # Nothing else to decide: job, event and outbox row in one statement and commit.
        message = dispatch.job_execute_message(new.job, available_at=new.later)
        insert_together(new.job, new.accepted, message)
        outbox_after_commit(message)


def _insert_waiting(new: NewJob) -> None:
    """A job with `after`: its rows with a dormant outbox row, older versions of its business
    key superseded, then its dependencies (which release it at once if all ended already).
    No admission now: it is not active until released, and its claim applies the rules."""
    request = new.checked.request
    dormant = dispatch.job_execute_message(new.job, available_at=links.DORMANT_AT)
    insert_together(new.job, new.accepted, dormant)
    if request.business_key:
        _supersede_older_versions(new.job)
    links.dependencies_record(new.job, request.after, after_failure=request.after_failure)


def _insert_keyed(new: NewJob, serialization_key: str) -> None:
    """A key and no other rule: admission, job, event and (if admitted) the outbox row in one
    statement and commit."""
    keyed = dispatch.job_execute_message(new.job, available_at=new.later)
    if admission.insert_admitted(
        new.job, new.accepted, keyed, lock_keys=new.keys, serialization_key=serialization_key
    ):
        outbox_after_commit(keyed)


def _insert_superseding(new: NewJob) -> None:
    """Insert first: the job's unique entry makes a racing submit of the same logical job
    wait for us, so only the winner cancels older versions (one of which may be the head of
    the serialization key: before admission)."""
    insert_together(new.job, new.accepted)
    _supersede_older_versions(new.job)
    if admission.admission_open(new.job, new.checked.spec):
        dispatch.job_enqueue_execute(new.job, available_at=new.later)


def _insert_under_admission(new: NewJob) -> None:
    """Admission first, under its locks; the outbox row, if any, then goes in the same
    statement as the job."""
    admitted = admission.admission_open(new.job, new.checked.spec)
    message = dispatch.job_execute_message(new.job, available_at=new.later) if admitted else None
    insert_together(new.job, new.accepted, *([message] if message else []))
    if message is not None:
        outbox_after_commit(message)
