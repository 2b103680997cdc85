"""`jobs.submit_many`: many jobs in one transaction, all or none.

Plain requests (no idempotency key, business key or serialization key, a kind without caps)
are checked first and written column-wise (jobs.bulk); every other request goes through
`job_submit` inside the same transaction, with its replay and admission rules.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction

from outbox.fastpath import writing

from . import bulk
from .models import Job
from .rows import CheckedSubmit, SubmitRequest
from .submission import job_check, job_is_plain, job_lock_keys, job_submit, job_submit_checked

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
    idempotency key) raises and the whole call writes nothing. A request with `after` goes
    through `job_submit` (after the plain ones: it may name them).
    """
    requests = list(requests)
    plain: list[tuple[int, CheckedSubmit]] = []
    rest: list[tuple[int, dict[str, Any]]] = []
    for index, request in enumerate(requests):
        unknown = set(request) - _SUBMIT_FIELDS
        if unknown:
            raise TypeError(f"submit_many request {index}: unknown fields {sorted(unknown)}")
        if request.get("idempotency_key") or request.get("business_key") or request.get("after"):
            rest.append((index, request))
            continue
        submit = _plain_submit(SubmitRequest(**{**_PLAIN_DEFAULTS, **request}))
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


def jobs_submit_checked(submits: Sequence[CheckedSubmit]) -> list[Job]:
    """Checked requests (`job_check`) in the caller's transaction, as `job_submit_many`
    writes them: the plain ones column-wise, first; every other one through
    `job_submit_checked`, in order (a request with `after` may name any before it)."""
    plain = [s for s in submits if job_is_plain(s)]
    written = dict(zip(map(id, plain), bulk.jobs_insert_plain(plain) if plain else [], strict=True))
    return [written[id(s)] if id(s) in written else job_submit_checked(s) for s in submits]


def _plain_submit(request: SubmitRequest) -> CheckedSubmit | None:
    """A checked keyless request, or None when an admission rule applies (job_submit's way)."""
    checked = job_check(request)
    return None if job_lock_keys(checked) else checked
