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

The statement goes to psycopg with PostgreSQL's own `$1, $2, ...` placeholders, through its
`RawCursor`: psycopg's `%s` form is parsed in Python on every call once a statement has more
than 50 values (psycopg caches the parse only below that), which was 0.3 ms of the
submitting process's CPU on every accept (59 values). The `$n` form is made once per statement
here (`numbered`) and then sent as it is.

Django's own cursors bind on the client and never prepare. Once a threshold is set, though,
psycopg watches every statement of the connection: a rollback (or an ALTER/DROP sent on it)
makes it forget what it prepared (DEALLOCATE ALL), and the next calls prepare again.

`JOBS_PREPARED_STATEMENTS = False` turns this off, for a connection pooler in transaction
mode that does not keep prepared statements (PgBouncer before 1.22).
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg
from django.db import NotSupportedError, connection
from psycopg.types.array import ListBinaryDumper

from .conf import jobs_settings

_NEVER_BY_COUNT = sys.maxsize  # psycopg prepares a statement after this many runs, unasked
_PLAN_CHANGED = "cached plan must not change result type"
_PERCENT = re.compile(r"%(.?)", re.DOTALL)
_NUMBERED_CACHE = 512  # statements kept in their `$n` form: the fixed statements, with room


class Numbered(NamedTuple):
    """A statement in PostgreSQL's `$n` form; `binary`: its placeholders were all `%b`."""

    sql: str
    binary: bool


@functools.lru_cache(maxsize=_NUMBERED_CACHE)
def numbered(sql: str) -> Numbered | None:
    """`sql` with PostgreSQL's `$1, $2, ...` for its placeholders, all `%s` or all `%b`
    (`%%`: a literal `%`); None when it holds anything else (a `$` of its own, named
    placeholders, `%s` and `%b` mixed), which then goes through psycopg's own parse and its
    error."""
    if "$" in sql:
        return None
    count = 0
    kinds: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        kind = match.group(1)
        if kind == "%":
            return "%"
        kinds.add(kind)
        count += 1
        return f"${count}"

    converted = _PERCENT.sub(replace, sql)
    if kinds - {"s"} and kinds != {"b"}:
        return None
    return Numbered(converted, kinds == {"b"})


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
    """Run `sql` through Django's execute wrappers, which see it in its `%s` form (and may
    change it, as sqlcommenter does); what a wrapper passes on is sent in its `$n` form."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(connection.wrap_database_errors)
        cursor: psycopg.Cursor[Any] = stack.enter_context(psycopg.RawCursor(raw))
        ran = [cursor]

        def run(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
            sent = numbered(sql)
            if sent is not None:
                if sent.binary:
                    _binary_lists(cursor)
                cursor.execute(sent.sql, params, prepare=True)
                return
            parsed: psycopg.Cursor[Any] = stack.enter_context(psycopg.Cursor(raw))
            parsed.execute(sql, params, prepare=True)
            ran[0] = parsed

        executor: Any = run
        for wrapper in reversed(connection.execute_wrappers):
            executor = functools.partial(wrapper, executor)
        executor(sql, params, False, {"connection": connection, "cursor": cursor})
        return _rows(ran[0], one=one)


def _binary_lists(cursor: psycopg.Cursor[Any]) -> None:
    """Send lists in PostgreSQL's binary array format, as `%b` asks: a raw statement's values
    take each type's last registered dumper, which for a list is the text one (its elements
    quoted on the client). Every other type a `%b` statement sends (numbers, UUIDs, times,
    text, JSON) goes the same with either: its value is cast in the statement."""
    cursor.adapters.register_dumper(list, ListBinaryDumper)
