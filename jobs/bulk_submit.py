"""`jobs.submit_many`: many jobs in one transaction, all or none.

Plain requests (no idempotency key, business key or serialization key, a kind without caps)
are checked first and written column-wise (jobs.bulk); every other request goes through
`job_submit` inside the same transaction, with its replay and admission rules.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from outbox.fastpath import writing

from . import admission, bulk
from .models import Job
from .submission import job_check, job_submit

# What a submit_many request may name, and the defaults of what it leaves out: job_submit's
# keywords, read from its signature so the two never drift apart.
_SUBMIT_PARAMETERS = inspect.signature(job_submit).parameters
_SUBMIT_FIELDS = frozenset(_SUBMIT_PARAMETERS)
_PLAIN_DEFAULTS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in _SUBMIT_PARAMETERS.items()
    if parameter.default is not inspect.Parameter.empty
}


@writing()
def job_submit_many(requests: Iterable[dict[str, Any]]) -> list[Job]:
    """Accept many jobs in ONE transaction (the caller's, if any): all or none.

    Each request holds `job_submit`'s keywords. Plain requests (no idempotency key, business
    key or serialization key, and a kind without caps) are written with one INSERT per table
    (jobs, events, outbox rows; jobs.bulk) and published after the commit in batch messages
    (outbox.batching). Any other request goes through `job_submit` inside the same
    transaction, with its replay and admission rules. Jobs come back in request order. A
    plain request is checked before anything is written, a keyed one inside the transaction;
    either way one bad request (an unknown kind, an invalid or too large input, a conflicting
    idempotency key) raises and the whole call writes nothing.
    """
    requests = list(requests)
    plain: list[tuple[int, bulk.PlainSubmit]] = []
    rest: list[tuple[int, dict[str, Any]]] = []
    for index, request in enumerate(requests):
        unknown = set(request) - _SUBMIT_FIELDS
        if unknown:
            raise TypeError(f"submit_many request {index}: unknown fields {sorted(unknown)}")
        if request.get("idempotency_key") or request.get("business_key"):
            rest.append((index, request))
            continue
        submit = _plain_submit({**_PLAIN_DEFAULTS, **request})
        if submit is None:
            rest.append((index, request))
        else:
            plain.append((index, submit))
    out: list[Job | None] = [None] * len(requests)
    with transaction.atomic():
        if plain:
            written = bulk.jobs_insert_plain([submit for _, submit in plain])
            for (index, _), job in zip(plain, written, strict=True):
                out[index] = job
        for index, request in rest:
            out[index] = job_submit(**request)
    return [job for job in out if job is not None]


def _plain_submit(request: dict[str, Any]) -> bulk.PlainSubmit | None:
    """A checked keyless request (every keyword of job_submit), or None when an admission
    rule applies (job_submit's way)."""
    spec, fingerprint = job_check(
        **{name: value for name, value in request.items() if name in _CHECK_PARAMETERS}
    )
    tenant = request["tenant"]
    if admission.admission_lock_keys(
        kind=request["kind"],
        tenant_id=tenant.pk if tenant else None,
        serialization_key=request["serialization_key"],
        spec=spec,
    ):
        return None
    return bulk.PlainSubmit(spec=spec, fingerprint=fingerprint, **request)


_CHECK_PARAMETERS = frozenset(inspect.signature(job_check).parameters)
