"""A success's statement: leased -> succeeded, fenced, for one job or many.

The one spelling of a call of the database function jobs_complete_many (jobs/sql): a plain
completion runs it alone (`complete_many`); a keyed one runs it inside the admission
statements that also hand the key over (jobs.admission).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection

from . import prepared
from .leases import Lease
from .models import Job

COMPLETE_MANY_CALL = (
    "jobs_complete_many(%s::uuid[], %s::bigint[], %s::text, %s::int[], %s::jsonb[])"
)
_COMPLETE_MANY_SQL = f"SELECT * FROM {COMPLETE_MANY_CALL}"


@dataclass(frozen=True)
class Completion:
    """A finished handler's result, waiting for its (group) commit."""

    lease: Lease
    result: dict[str, Any]


def complete_params(completions: list[Completion]) -> list[Any]:
    """The parameters of `COMPLETE_MANY_CALL` for these completions (one owner token)."""
    field_ = Job._meta.get_field("result")
    return [
        [c.lease.job_id for c in completions],
        [c.lease.generation for c in completions],
        completions[0].lease.worker,
        [c.lease.attempt for c in completions],
        [field_.get_db_prep_value(c.result, connection) for c in completions],
    ]


def complete_many(completions: list[Completion]) -> set[UUID]:
    """leased -> succeeded for jobs of one owner token in one statement, each fenced by its
    own generation; returns the ids completed (a missing one lost its lease)."""
    if not completions:
        return set()
    rows = prepared.fetchall(_COMPLETE_MANY_SQL, complete_params(completions))
    return {row["id"] for row in rows}
