"""The statements every job makes, as server-side prepared statements on Django's connection.

Django's psycopg backend binds parameters on the client: each call sends the SQL with its
values written in, and PostgreSQL parses, analyses and plans it again. For the accept (three
rows in one statement, about sixty values) that was a third of PostgreSQL's time on the call
(`perf`: raw_parser, parse_analyze and the planner) and a fifth of the submitting process's
(psycopg quoting each value). Here the statement is sent once per connection with
placeholders (`prepare=True`), then only its values.

Everything else stays Django's: the same connection and transaction (autocommit, `atomic`,
savepoints), its errors (`IntegrityError` and friends), its broken-transaction check and its
execute wrappers (which see psycopg's cursor, not Django's wrapper). With query logging on
(`DEBUG`, `CaptureQueriesContext`) the statement goes through Django's cursor instead, so it is
logged as any other query.

Django's own cursors bind on the client and never prepare. Once a threshold is set, though,
psycopg watches every statement of the connection: a rollback (or an ALTER/DROP sent on it)
makes it forget what it prepared (DEALLOCATE ALL), and the next calls prepare again.

`JOBS_PREPARED_STATEMENTS = False` turns this off, for a connection pooler in transaction
mode that does not keep prepared statements (PgBouncer before 1.22).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any

import psycopg
from django.db import NotSupportedError, connection

from .conf import jobs_settings

_NEVER_BY_COUNT = sys.maxsize  # psycopg prepares a statement after this many runs, unasked
_PLAN_CHANGED = "cached plan must not change result type"


def fetchone(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """Run one statement (`%s` placeholders) and return its first row, if it has one."""
    _, rows = _execute(sql, params, one=True)
    return rows[0] if rows else None


def fetchall(sql: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    """Run one statement and return every row by column name (a function's result columns
    are read by name, never by position)."""
    names, rows = _execute(sql, params, one=False)
    return [dict(zip(names, row, strict=True)) for row in rows]


def fetchone_named(sql: str, params: Sequence[Any]) -> dict[str, Any] | None:
    """Run one statement and return its first row by column name, if it has one."""
    names, rows = _execute(sql, params, one=True)
    return dict(zip(names, rows[0], strict=True)) if rows else None


Rows = tuple[list[str], list[tuple[Any, ...]]]


def _rows(cursor: Any, *, one: bool) -> Rows:
    """The column names and the rows (the first only with `one`) a statement returned."""
    if not cursor.description:
        return [], []
    names = [column.name for column in cursor.description]
    if one:
        row = cursor.fetchone()
        return names, [] if row is None else [tuple(row)]
    return names, [tuple(row) for row in cursor.fetchall()]


def _execute(sql: str, params: Sequence[Any], *, one: bool) -> Rows:
    if not jobs_settings.PREPARED_STATEMENTS or connection.queries_logged:
        with connection.cursor() as logged:
            logged.execute(sql, params)
            return _rows(logged, one=one)
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_no_broken_transaction()
    raw = connection.connection
    if raw.prepare_threshold is None:
        # Django turns preparing off on its connections; its own (client-binding) cursors
        # never prepare anyway, so this lets only the statements sent from here prepare.
        raw.prepare_threshold = _NEVER_BY_COUNT
    try:
        return _run(raw, sql, params, one=one)
    except NotSupportedError as exc:
        # A migration changed what a prepared statement returns (a function's result
        # columns): PostgreSQL refuses the old plan. Outside a transaction, forget every
        # statement of this connection (psycopg drops its cache on DEALLOCATE ALL) and retry.
        # Inside one the error stands: the transaction is aborted, and its rollback makes
        # psycopg forget the statements, so the next call on this connection prepares anew.
        idle = raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if _PLAN_CHANGED not in str(exc) or not idle:
            raise
        with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:
            cursor.execute("DEALLOCATE ALL")
        return _run(raw, sql, params, one=one)


def _run(raw: psycopg.Connection[Any], sql: str, params: Sequence[Any], *, one: bool) -> Rows:
    with connection.wrap_database_errors, psycopg.Cursor(raw) as cursor:

        def run(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
            cursor.execute(sql, params, prepare=True)

        executor: Any = run
        for wrapper in reversed(connection.execute_wrappers):
            executor = functools.partial(wrapper, executor)
        executor(sql, params, False, {"connection": connection, "cursor": cursor})
        return _rows(cursor, one=one)
