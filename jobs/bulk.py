"""The plain requests of `job_submit_many`, written column-wise: one INSERT per table.

Each statement is `INSERT INTO t (...) SELECT ... FROM unnest(%b::uuid[], %b::jsonb[], ...)`:
one array per column whose value differs between rows, one value per column that does not (a
constant of the accept, or the model field's default). The arrays go as binary parameters of a
prepared statement (jobs.prepared), so nothing is quoted on the client, and no model object is
made per row of jobs_jobevent; the jobs come back as `Job.from_db`, the outbox rows (with the
ids the INSERT returned) as `OutboxEntry.from_db`.

The rows are those `job_submit` writes for the same request: jobs.rows spells a job's values
and its `accepted` event for both, `job_execute_message` (jobs.dispatch) and
`outbox_reserved_until` (outbox.services) its outbox row, and
tests/integration/test_submit_many.py compares every column.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from itertools import repeat
from typing import Any

from django.db import connection
from django.db.models import Field, Model
from django.utils import timezone

from outbox.models import OutboxEntry
from outbox.services import outbox_after_commit_many, outbox_reserved_until

from . import dispatch, prepared, rows, tracing
from .models import Job, JobEvent
from .rows import CheckedSubmit

# Columns whose values differ between the rows of one call; every other column takes one value.
_JOB_COLUMNS = (  # a field of rows.job_values, by its name as a column
    "id",
    "kind",
    "kind_version",
    "business_key",
    "input_version",
    "idempotency_key",
    "request_fingerprint",
    "input",
    "serialization_key",
    "max_attempts",
    "priority",
    "callback_url",
    "next_attempt_at",
    "deadline",
)
# and these, by their key's column
_RELATED = ("owner", "tenant", "input_ref", "replay_of", "parent")
_RELATED_COLUMNS = tuple((name, f"{name}_id") for name in _RELATED)
_EVENT_COLUMNS = ("job_id", "details")
_OUTBOX_COLUMNS = ("queue", "job_id", "kwargs", "priority", "available_at", "reserved_until")


def jobs_insert_plain(submits: Sequence[CheckedSubmit]) -> list[Job]:
    """Write the jobs of these plain requests (no lock to take, nothing to decide), their
    `accepted` events and their outbox rows in the caller's transaction (three statements),
    and publish the rows once it commits. An input Django cannot encode or an unsaved related
    row raises before the first statement."""
    plain = _Plain(submits)
    jobs_part, events_part, outbox_part = plain.statements()
    prepared.fetchall(*jobs_part)
    prepared.fetchall(*events_part)
    jobs, entries = plain.written(prepared.fetchall(*outbox_part))
    outbox_after_commit_many(entries)
    return jobs


def jobs_insert_plain_statement(
    submits: Sequence[CheckedSubmit],
) -> tuple[list[Job], list[OutboxEntry]]:
    """`jobs_insert_plain`'s rows in ONE statement (data-modifying CTEs: all or nothing), which
    outside a transaction is its own and commits before this returns; the outbox rows come
    back unpublished (the caller publishes them: `outbox_after_commit_many`)."""
    plain = _Plain(submits)
    (jobs_sql, jobs_params), (events_sql, events_params), (outbox_sql, outbox_params) = (
        plain.statements()
    )
    returned = prepared.fetchall(
        f"WITH j AS ({jobs_sql}), e AS ({events_sql}) {outbox_sql}",
        [*jobs_params, *events_params, *outbox_params],
    )
    return plain.written(returned)


class _Plain:
    """The rows of plain requests accepted now, column-wise: their statements, and the
    model instances of what they wrote."""

    def __init__(self, submits: Sequence[CheckedSubmit]) -> None:
        self.submits = submits
        self.now = now = timezone.now()
        self.jobs = _job_columns(submits, now)
        tracing.jobs_trace_begin(self.jobs)
        fixed = {**rows.NEW_JOB, "created_at": now, "updated_at": now}
        self.job_values = _fixed_values(Job, self.jobs, fixed)
        self.messages = _messages(self.jobs, self.job_values, now)
        self.message_values = _fixed_values(
            OutboxEntry, self.messages, {"task_name": dispatch.EXECUTE_TASK, "created_at": now}
        )

    def statements(self) -> list[tuple[str, list[Any]]]:
        """The INSERT of the jobs, of their `accepted` events and of their outbox rows (which
        returns each row's id and job id)."""
        jobs, now = self.jobs, self.now
        messages = self.messages
        return [
            _insert_sql(
                Job, {**jobs, **_json_columns(jobs, "input", "trace_context")}, self.job_values
            ),
            _insert_sql(
                JobEvent,
                _event_columns(self.submits, jobs),
                _accepted_values(self.job_values, now),
            ),
            _insert_sql(
                OutboxEntry,
                {**messages, "kwargs": [_json(kwargs) for kwargs in messages["kwargs"]]},
                self.message_values,
                returning=("id", "job_id"),
            ),
        ]

    def written(self, returned: list[dict[str, Any]]) -> tuple[list[Job], list[OutboxEntry]]:
        """The jobs as `job_submit` returns them, and the outbox rows as saved, with the ids
        the outbox INSERT `returned`."""
        ids = {row["job_id"]: row["id"] for row in returned}
        entries = _instances(
            OutboxEntry,
            {**self.messages, "id": [ids[i] for i in self.jobs["id"]]},
            self.message_values,
        )
        return _jobs(self.submits, self.jobs, self.job_values), entries


def _job_columns(submits: Sequence[CheckedSubmit], now: datetime) -> dict[str, list[Any]]:
    """The jobs' varying columns (`input` as given): `rows.job_values` of each."""
    columns: dict[str, list[Any]] = {name: [] for name in _JOB_COLUMNS}
    columns.update((column, []) for _, column in _RELATED_COLUMNS)
    plain = [(name, columns[name].append) for name in _JOB_COLUMNS]
    related = [(name, columns[column].append) for name, column in _RELATED_COLUMNS]
    for s in submits:
        values = rows.job_values(s, now)
        for name, append in plain:
            append(values[name])
        for name, append in related:
            append(_related_id(name, values[name]))
    return columns


def _event_columns(
    submits: Sequence[CheckedSubmit], jobs: dict[str, list[Any]]
) -> dict[str, list[Any]]:
    """The `accepted` events' varying columns (JSON as text): `rows.accepted_details`."""
    none = _json({})
    return {
        "job_id": jobs["id"],
        "details": [
            _json(details) if (details := rows.accepted_details(s.request.run_after)) else none
            for s in submits
        ],
    }


def _accepted_values(job_values: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Every other column of an `accepted` event (`rows.ACCEPTED_EVENT`) of a new job, as
    `job_event_new` fills them (worker and actor: the fields' defaults)."""
    given = {
        **rows.ACCEPTED_EVENT,
        "generation": job_values["generation"],
        "attempt": job_values["attempt"],
        "at": now,
    }
    return _fixed_values(JobEvent, _EVENT_COLUMNS, given)


def _messages(
    jobs: dict[str, list[Any]], job_values: dict[str, Any], now: datetime
) -> dict[str, list[Any]]:
    """The outbox rows' varying columns (`kwargs` as dicts), as `job_execute_message` fills
    them: due at the job's first due time, at its priority, reserved as
    `outbox_reserved_until` says."""
    queues: dict[tuple[str, int], str] = {}
    reserved: dict[datetime, datetime | None] = {}  # by due time: most rows are due `now`
    columns: dict[str, list[Any]] = {name: [] for name in _OUTBOX_COLUMNS}
    for job_id, kind, version, priority, due in zip(
        jobs["id"],
        jobs["kind"],
        jobs["kind_version"],
        jobs["priority"],
        jobs["next_attempt_at"],
        strict=True,
    ):
        queue = queues.get((kind, version))
        if queue is None:
            queue = queues[kind, version] = dispatch.execute_queue(kind, version)
        columns["queue"].append(queue)
        columns["job_id"].append(job_id)
        columns["kwargs"].append(
            dispatch.execute_kwargs(job_id, job_values["generation"], kind, version)
        )
        columns["priority"].append(priority)
        columns["available_at"].append(due)
        if due not in reserved:
            reserved[due] = outbox_reserved_until(due=due, now=now)
        columns["reserved_until"].append(reserved[due])
    tracing.bulk_message_hints(columns["kwargs"], jobs)
    return columns


def _jobs(
    submits: Sequence[CheckedSubmit], columns: dict[str, list[Any]], values: dict[str, Any]
) -> list[Job]:
    """The written jobs as `job_submit` returns them: related rows cached, `replayed` False."""
    jobs: list[Job] = _instances(Job, columns, values)
    caches = [Job._meta.get_field(name) for name in _RELATED]
    for job, s in zip(jobs, submits, strict=True):
        for field, name in zip(caches, _RELATED, strict=True):
            related = getattr(s.request, name)
            if related is not None:
                field.set_cached_value(job, related)  # type: ignore[union-attr]
        job.replayed = False
    return jobs


def _related_id(name: str, obj: Model | None) -> Any:
    """The key of a related row, refused as the ORM refuses it (a wrong model, unsaved)."""
    if obj is None:
        return None
    field = Job._meta.get_field(name)
    if not isinstance(obj, field.related_model):  # type: ignore[arg-type]
        raise ValueError(
            f'Cannot assign "{obj!r}": "Job.{name}" must be a '
            f'"{field.related_model._meta.object_name}" instance.'  # type: ignore[union-attr]
        )
    if obj.pk is None:
        raise ValueError(
            f"save() prohibited to prevent data loss due to unsaved related object '{name}'."
        )
    return obj.pk


def _json_columns(columns: dict[str, list[Any]], *names: str) -> dict[str, list[str | None]]:
    """Those of these JSON columns that are present, encoded (`_json`) for the INSERT."""
    return {name: [_json(value) for value in columns[name]] for name in names if name in columns}


def _json(value: Any) -> str | None:
    """A JSONField value as Django's encoder writes it (None: SQL NULL)."""
    return None if value is None else json.dumps(value)


# -- column-wise INSERT ----------------------------------------------------------------------


def _fields(model: type[Model]) -> list[Field[Any, Any]]:
    """The columns an INSERT of `model` writes: every concrete one but an auto primary key."""
    meta = model._meta
    return [f for f in meta.concrete_fields if not f.generated and f is not meta.auto_field]


def _fixed_values(
    model: type[Model], varying: Iterable[str], given: dict[str, Any]
) -> dict[str, Any]:
    """The value of every column not in `varying`: `given`, else the field's default."""
    varying = set(varying)
    values: dict[str, Any] = {}
    for field in _fields(model):
        if field.attname in varying:
            continue
        if field.attname in given:
            values[field.attname] = given[field.attname]
        elif getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            raise ValueError(f"{model._meta.label}.{field.attname}: give its time")
        else:
            values[field.attname] = field.get_default()
    unknown = set(given) - set(values)
    if unknown:
        raise ValueError(f"{model._meta.label}: no columns {sorted(unknown)} (or varying)")
    return values


# (model, varying columns, returning) -> (INSERT statement, its fixed columns in order)
_STATEMENTS: dict[
    tuple[type[Model], tuple[str, ...], tuple[str, ...]], tuple[str, list[Field[Any, Any]]]
] = {}


def _statement(
    model: type[Model], varying: tuple[str, ...], returning: tuple[str, ...]
) -> tuple[str, list[Field[Any, Any]]]:
    key = (model, varying, returning)
    cached = _STATEMENTS.get(key)
    if cached is not None:
        return cached
    quote = connection.ops.quote_name
    fields = {f.attname: f for f in _fields(model)}
    fixed = [field for name, field in fields.items() if name not in varying]
    columns = ", ".join(quote(str(f.column)) for f in [*fixed, *(fields[n] for n in varying)])
    selected = [f"%b::{field.db_type(connection)}" for field in fixed]
    selected += [f"u.{quote(name)}" for name in varying]
    arrays = ", ".join(f"%b::{fields[name].db_type(connection)}[]" for name in varying)
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({columns}) SELECT {', '.join(selected)} "
        f"FROM unnest({arrays}) AS u({', '.join(quote(name) for name in varying)})"
    )
    if returning:
        sql += f" RETURNING {', '.join(quote(name) for name in returning)}"
    _STATEMENTS[key] = (sql, fixed)
    return sql, fixed


def _insert_sql(
    model: type[Model],
    columns: dict[str, list[Any]],
    fixed: dict[str, Any],
    *,
    returning: tuple[str, ...] = (),
) -> tuple[str, list[Any]]:
    """One INSERT of len(column) rows and its parameters: `columns` as arrays (values ready
    for psycopg, JSON as text), every other column once from `fixed` (model values); it
    returns the `returning` columns of each row."""
    sql, fixed_fields = _statement(model, tuple(columns), returning)
    params = [f.get_db_prep_save(fixed[f.attname], connection) for f in fixed_fields]
    params += columns.values()
    return sql, params


def _instances(
    model: type[Model], columns: dict[str, list[Any]], fixed: dict[str, Any]
) -> list[Any]:
    """Saved-looking instances of written rows, as a query would load them."""
    names = [f.attname for f in model._meta.concrete_fields]
    sources = [columns[n] if n in columns else repeat(fixed[n]) for n in names]
    alias = connection.alias
    return [
        model.from_db(alias, names, values) for values in zip(*sources, strict=False)
    ]  # `repeat`s are endless
