"""The names bench/statements.py gives pg_stat_statements' rows in docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.statements import label

SQL = Path(__file__).resolve().parents[2] / "jobs" / "sql"


def inner(function: str, first_cte: str) -> str:
    """The statement a PL/pgSQL function runs, from `WITH <first_cte> AS` on."""
    text = (SQL / f"{function}.sql").read_text()
    return text[text.index(f"WITH {first_cte} AS") :]


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("SELECT * FROM jobs_claim_many($1::uuid[], $2::text[])", "jobs_claim_many()"),
        ("SELECT outbox_mark_published($1::int2[]::bigint[], $2::text)", "outbox_mark_published()"),
        ("SELECT set_config('synchronous_commit', 'off', true)", "set_config()"),
        (
            'WITH r0 AS (INSERT INTO "jobs_job" ("id") VALUES ($1)), r1 AS (INSERT INTO '
            '"jobs_jobevent" ("job_id") VALUES ($2)) INSERT INTO "outbox_outboxentry" ("job_id") '
            'VALUES ($3) RETURNING "outbox_outboxentry"."id"',
            "INSERT jobs_job, jobs_jobevent, outbox_outboxentry",
        ),
        (
            'SELECT 1 FROM ONLY "public"."auth_user" x WHERE "id" OPERATOR(pg_catalog.=) $1 '
            "FOR KEY SHARE OF x",
            "foreign key check on auth_user",
        ),
        (
            "INSERT INTO outbox_counter (name, value, updated_at) VALUES (p_name, p_by, now()) "
            "ON CONFLICT (name) DO UPDATE SET value = outbox_counter.value + p_by",
            "INSERT/UPDATE outbox_counter",
        ),
    ],
)
def test_label(query: str, name: str) -> None:
    assert label(query) == name


def test_a_functions_statements_are_told_apart_by_their_parts() -> None:
    claim = label(inner("jobs_claim_many", "req"))
    complete = label(inner("jobs_complete_many", "done"))
    assert (
        claim == "INSERT/UPDATE jobs_job, jobs_jobevent (WITH req, target, claimed, claim_events)"
    )
    assert complete == "INSERT/UPDATE jobs_job, jobs_jobevent (WITH done, done_events)"
