"""Insert several new model rows in one statement (one round trip, one implicit transaction).

`insert_together(a, b, c)` sends `WITH r0 AS (INSERT a), r1 AS (INSERT b) INSERT c RETURNING
pk`: every part runs (PostgreSQL executes data-modifying CTEs whether or not they are read),
all or nothing. The SQL and values of each part come from Django's own insert compiler, as
`Model.save()` would produce them (field preparation, `auto_now_add`, JSON encoding). Rows may
reference each other: the foreign keys are DEFERRABLE INITIALLY DEFERRED and checked at the
end of the statement's transaction. Unlike `save()` this sends no pre/post-save signals; the
models passed here have none.

Only the last object's auto primary key is read back (the earlier ones must have their key set
already, as Job's client-side UUIDv7 has, or not need it, as a JobEvent).
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, Model
from django.db.models.sql import InsertQuery

from . import prepared

# (model, returning) -> (fields, INSERT statement): the statement of a model's full-row insert
# never changes, only its values; compiling it is most of an ORM insert's CPU time.
_STATEMENTS: dict[tuple[type[Model], bool, bool], tuple[list[Field[Any, Any]], str]] = {}


def _statement(obj: Model, *, returning: bool) -> tuple[list[Field[Any, Any]], str]:
    meta = obj._meta
    skip_auto = meta.auto_field is not None and getattr(obj, meta.auto_field.attname) is None
    key = (type(obj), returning, skip_auto)
    cached = _STATEMENTS.get(key)
    if cached is not None:
        return cached
    fields = [f for f in meta.local_concrete_fields if not f.generated]
    if skip_auto:
        fields = [f for f in fields if f is not meta.auto_field]
    query = InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    compiler = query.get_compiler(connection=connection)
    compiler.returning_fields = [meta.pk] if returning else None
    statements = compiler.as_sql()
    if len(statements) != 1:
        raise ValueError(f"{meta.label}: expected one INSERT, got {len(statements)}")
    sql, params = statements[0]
    if sql.count("%s") != len(params):
        raise ValueError(f"{meta.label}: an INSERT whose placeholders are not one per value")
    _STATEMENTS[key] = (fields, sql)
    return fields, sql


def insert_sql(obj: Model, *, returning: bool) -> tuple[str, list[Any]]:
    """The statement and the values, prepared as Django's insert compiler prepares them
    (`pre_save` with add=True, then `get_db_prep_save`)."""
    for field in obj._meta.local_concrete_fields:
        if hasattr(getattr(obj, field.attname, None), "resolve_expression"):
            raise ValueError(f"{obj._meta.label}.{field.name}: expressions are not supported")
    # An unsaved related row (a Tenant never saved, say) is refused as save() refuses it,
    # instead of writing NULL.
    obj._prepare_related_fields_for_save(operation_name="save")  # type: ignore[attr-defined]
    fields, sql = _statement(obj, returning=returning)
    # The thread's connection itself, not the `connection` proxy: each field's preparation
    # reads it several times, and each read through the proxy is a thread-local lookup.
    wrapper = connections[DEFAULT_DB_ALIAS]
    values = [
        field.get_db_prep_save(field.pre_save(obj, True), connection=wrapper) for field in fields
    ]
    return sql, values


def insert_together(*objs: Model) -> None:
    """INSERT every object in one statement; set the last one's auto primary key."""
    if not objs:
        return
    parts: list[str] = []
    params: list[Any] = []
    *first, last = objs
    for index, obj in enumerate(first):
        sql, values = insert_sql(obj, returning=False)
        parts.append(f"r{index} AS ({sql})")
        params.extend(values)
    last_sql, last_values = insert_sql(last, returning=True)
    params.extend(last_values)
    sql = (f"WITH {', '.join(parts)} " if parts else "") + last_sql
    row = prepared.fetchone_named(sql, params)
    mark_saved(*first)
    mark_saved(last, returned=row)


def mark_saved(*objs: Model, returned: dict[str, Any] | None = None) -> None:
    """These objects are rows now (as after `save()`); the primary key of each is set from
    `returned`, the row its INSERT returned, when given."""
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
        pk = obj._meta.pk
        if returned is not None and pk is not None:
            setattr(obj, pk.attname, returned[str(pk.column)])
