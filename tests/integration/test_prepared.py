"""The per-job statements run as prepared statements on Django's own connection."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

import jobs
from jobs import prepared
from jobs.claims import job_claim_id
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_submit_and_claim__are_prepared_once_per_connection_then_reused(user: Any) -> None:
    connection.close()  # a fresh connection: nothing prepared yet
    first = jobs.submit(kind="noop", input={"n": 1}, owner=user)
    jobs.submit(kind="noop", input={"n": 2}, owner=user)
    claim = job_claim_id(first.pk, worker="w:p:1", kind="noop", kind_version=1)

    assert claim.lease is not None
    statements = _prepared_statements()
    inserts = [s for s in statements if s.startswith('WITH r0 AS (INSERT INTO "jobs_job"')]
    claims = [s for s in statements if "jobs_claim_many(" in s]
    assert len(inserts) == 1, statements  # two submits, one prepared statement
    assert "$1" in inserts[0] and "%s" not in inserts[0]
    assert len(claims) == 1, statements


def test_turned_off__nothing_is_prepared_and_the_job_still_runs_the_same_path(
    user: Any, settings: Any
) -> None:
    settings.JOBS_PREPARED_STATEMENTS = False
    connection.close()
    job = jobs.submit(kind="noop", input={}, owner=user)
    claim = job_claim_id(job.pk, worker="w:p:2", kind="noop", kind_version=1)

    assert claim.lease is not None
    assert _prepared_statements() == []
    assert Job.objects.get(pk=job.pk).state == "leased"


# generation -1 breaks the JobEvent's CHECK (generation >= 0).
BAD_EVENT = (
    "INSERT INTO jobs_jobevent (job_id, from_state, to_state, generation, attempt, worker, "
    "actor, reason, details, at) VALUES (%s::uuid, '', 'queued', -1, 0, '', '', '', "
    "'{}'::jsonb, now())"
)


def test_a_constraint_violation__raises_djangos_integrity_error_and_leaves_no_row(
    user: Any,
) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    before = job.events.count()

    with pytest.raises(IntegrityError):
        prepared.fetchone(BAD_EVENT, [job.pk])
    assert job.events.count() == before


def test_inside_a_broken_atomic_block__refuses_like_djangos_cursor(user: Any) -> None:
    job = jobs.submit(kind="noop", input={}, owner=user)
    with transaction.atomic():
        with pytest.raises(IntegrityError), transaction.atomic(savepoint=False):
            prepared.fetchone(BAD_EVENT, [job.pk])
        with pytest.raises(TransactionManagementError):
            prepared.fetchone("SELECT %s::int", [1])
    assert prepared.fetchone("SELECT %s::int", [1]) == (1,)  # usable again after the block


def test_with_query_logging_on__the_statement_is_logged_like_any_other(user: Any) -> None:
    with CaptureQueriesContext(connection) as queries:
        row = prepared.fetchone("SELECT %s::int + 1", [41])

    assert row == (42,)
    assert [q["sql"] for q in queries.captured_queries] == ["SELECT 41::int + 1"]


def test_execute_wrappers_see_the_statement(user: Any) -> None:
    seen: list[str] = []

    def spy(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(spy):
        assert prepared.fetchone("SELECT %s::text", ["x"]) == ("x",)
    assert seen == ["SELECT %s::text"]


def migrate(*statements: str) -> None:
    """Run DDL from another connection, as a deploy's migration would."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        for statement in statements:
            other.execute(statement)


def _reshape(name: str) -> None:
    """Drop `name()` (one int column) and create it again with two columns."""
    migrate(
        f"DROP FUNCTION {name}()",
        f"CREATE FUNCTION {name}() RETURNS TABLE (a int, b text) LANGUAGE sql "
        "AS $$SELECT 2, 'two'$$",
    )


def test_a_function_whose_result_columns_changed__is_prepared_again_not_refused(
    user: Any,
) -> None:
    """What a migration that reshapes jobs_claim's result does to a worker's open connection:
    the DDL comes from another connection, so psycopg cannot know its statement went stale."""

    migrate("CREATE FUNCTION t_shape() RETURNS TABLE (a int) LANGUAGE sql AS 'SELECT 1'")
    try:
        assert prepared.fetchone("SELECT * FROM t_shape()", []) == (1,)
        _reshape("t_shape")
        assert prepared.fetchone("SELECT * FROM t_shape()", []) == (2, "two")
    finally:
        migrate("DROP FUNCTION IF EXISTS t_shape()")


def test_a_changed_result_inside_a_transaction__fails_once_then_the_connection_heals(
    user: Any,
) -> None:
    from django.db import NotSupportedError

    migrate("CREATE FUNCTION t_shape2() RETURNS TABLE (a int) LANGUAGE sql AS 'SELECT 1'")
    try:
        assert prepared.fetchone("SELECT * FROM t_shape2()", []) == (1,)
        _reshape("t_shape2")
        with pytest.raises(NotSupportedError), transaction.atomic():
            prepared.fetchone("SELECT * FROM t_shape2()", [])
        # The rollback made psycopg forget its statements: prepared again, not refused.
        assert prepared.fetchone("SELECT * FROM t_shape2()", []) == (2, "two")
    finally:
        migrate("DROP FUNCTION IF EXISTS t_shape2()")


@pytest.mark.parametrize(
    ("sql", "sent"),
    [
        ("SELECT %s::int, %s::text", ("SELECT $1::int, $2::text", False)),
        ("SELECT %s::text LIKE 'a%%'", ("SELECT $1::text LIKE 'a%'", False)),
        ("SELECT 1", ("SELECT 1", False)),
        ("SELECT %b::int[], %b::text", ("SELECT $1::int[], $2::text", True)),
        ("SELECT $1::int", None),  # a `$` of its own: psycopg's parse decides
        ("SELECT %(a)s", None),  # named placeholders
        ("SELECT %s, %b", None),  # text and binary mixed
        ("SELECT %t", None),  # text placeholders
        ("SELECT 5 %", None),  # a lone `%`: psycopg's error
    ],
)
def test_numbered__spells_placeholders_as_postgresql_does_or_leaves_it_to_psycopg(
    sql: str, sent: tuple[str, bool] | None
) -> None:
    assert prepared.numbered(sql) == sent


def test_a_statement_of_more_than_fifty_values__runs_with_its_literal_percent_intact(
    user: Any,
) -> None:
    """Past 50 values psycopg would parse the `%s` form on every call; sent numbered, the
    values and a literal `%%` still arrive as written."""
    values = list(range(60))
    sql = "SELECT " + " + ".join(["%s::int"] * len(values)) + ", 'x%%'"

    assert prepared.fetchone(sql, values) == (sum(values), "x%")
    assert prepared.fetchone(sql, values[::-1]) == (sum(values), "x%")  # the prepared one


def test_a_wrapper_that_changes_the_statement_past_numbering__still_runs_it(
    user: Any,
) -> None:
    """A wrapper may append to the statement (sqlcommenter does); what it passes on runs even
    when it holds what only psycopg's own parse handles (here a `$`)."""

    def commenting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        return execute(sql + " /* cost: $0 */", params, many, context)

    with connection.execute_wrapper(commenting):
        assert prepared.fetchone("SELECT %s::text", ["y"]) == ("y",)
        assert prepared.fetchall("SELECT %s::int AS n", [3]) == [{"n": 3}]


def test_a_binary_statement__sends_its_arrays_whole(user: Any) -> None:
    """`%b` statements (jobs.bulk's column-wise INSERTs) go numbered too: arrays with NULLs,
    empty ones, text, UUIDs and JSON as text arrive as they left."""
    ids = [uuid.uuid4(), uuid.uuid4()]
    arrays = [ids, ["a", None], [], ['{"k": 1}', None], [1, 2, None]]
    casts = ["uuid[]", "text[]", "int[]", "jsonb[]", "int[]"]
    filler = list(range(55))
    sql = (
        "SELECT "
        + ", ".join(f"%b::{cast}" for cast in casts)
        + ", "
        + " + ".join(["%b::int"] * len(filler))
    )

    row = prepared.fetchone(sql, [*arrays, *filler])

    # Django's connection reads jsonb as its text.
    assert row == (ids, ["a", None], [], ['{"k": 1}', None], [1, 2, None], sum(filler))
