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

from django.db import connection
from django.db.models import Model
from django.db.models.sql import InsertQuery


def _insert_sql(obj: Model, *, returning: bool) -> tuple[str, list[Any]]:
    meta = obj._meta
    fields = [f for f in meta.local_concrete_fields if not f.generated]
    if meta.auto_field is not None and getattr(obj, meta.auto_field.attname) is None:
        fields = [f for f in fields if f is not meta.auto_field]
    query = InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    compiler = query.get_compiler(connection=connection)
    compiler.returning_fields = [meta.pk] if returning else None
    statements = compiler.as_sql()
    if len(statements) != 1:
        raise ValueError(f"{meta.label}: expected one INSERT, got {len(statements)}")
    sql, params = statements[0]
    return sql, list(params)


def insert_together(*objs: Model) -> None:
    """INSERT every object in one statement; set the last one's auto primary key."""
    if not objs:
        return
    parts: list[str] = []
    params: list[Any] = []
    *first, last = objs
    for index, obj in enumerate(first):
        sql, values = _insert_sql(obj, returning=False)
        parts.append(f"r{index} AS ({sql})")
        params.extend(values)
    last_sql, last_values = _insert_sql(last, returning=True)
    params.extend(last_values)
    sql = (f"WITH {', '.join(parts)} " if parts else "") + last_sql
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
    if row is not None and last._meta.pk is not None:
        setattr(last, last._meta.pk.attname, row[0])
