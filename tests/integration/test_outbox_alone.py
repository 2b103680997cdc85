"""`outbox` stands without `jobs`: it migrates in a project that lacks `jobs` and imports
nothing of it; a database migrated before the outbox had counters of its own moves forward and
keeps `relay_published_total`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.harness import ROOT

pytestmark = pytest.mark.timeout(120)

# The mark as outbox 0002 defined it until the outbox had counters of its own (git 659e899):
# a database migrated then runs this text, which counts in jobs' signal table.
MARK_AT_PREVIOUS_HEAD = """
CREATE OR REPLACE FUNCTION outbox_mark_published(p_ids bigint[], p_counter text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    marked int;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE outbox_outboxentry
    SET published_at = GREATEST(now(), created_at), reserved_until = NULL, last_error = ''
    WHERE id = ANY(p_ids) AND published_at IS NULL;
    GET DIAGNOSTICS marked = ROW_COUNT;
    IF marked > 0 THEN
        PERFORM jobs_signal_add(p_counter, '', marked);
    END IF;
    RETURN marked;
END;
$$;
"""

# Every module of the outbox, migrations included, imported in the project without `jobs`.
IMPORT_ALL = """
import json, pkgutil, sys
import django
django.setup()
import outbox
for module in pkgutil.walk_packages(outbox.__path__, "outbox."):
    __import__(module.name)
print(json.dumps(sorted(m for m in sys.modules if m == "jobs" or m.startswith("jobs."))))
"""


def _server() -> dict[str, Any]:
    from django.db import connection

    s = connection.settings_dict
    return {
        "host": s["HOST"] or "127.0.0.1",
        "port": int(s["PORT"] or 5432),
        "user": s["USER"] or "postgres",
    }


@pytest.fixture
def database() -> Iterator[dict[str, Any]]:
    """A new, empty database on the suite's server, dropped afterwards."""
    server = _server()
    name = f"dj_outbox_alone_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**server, dbname="postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield {**server, "dbname": name}
    finally:
        with psycopg.connect(**server, dbname="postgres", autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def _url(db: dict[str, Any]) -> str:
    return f"postgres://{db['user']}@{db['host']}:{db['port']}/{db['dbname']}"


def _run(settings: str, db: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """A command of a project with these settings on `db` (a broker URL only for the checks)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": settings,
        "DATABASE_URL": _url(db),
        "JOBS_TEST_OUTBOX_ALONE_DATABASE_URL": _url(db),
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/15",
    }
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _tables(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    return {row[0] for row in rows}


def _mark_new_rows(conn: psycopg.Connection[Any], n: int) -> int:
    conn.execute(
        "INSERT INTO outbox_outboxentry (task_name, queue, kwargs, available_at, "
        "publish_attempts, last_error, created_at) "
        "SELECT 't', 'q', '{}', now(), 0, '', now() FROM generate_series(1, %s)",
        [n],
    )
    row = conn.execute(
        "SELECT outbox_mark_published(array_agg(id), 'relay_published_total') "
        "FROM outbox_outboxentry WHERE published_at IS NULL"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _counter(conn: psycopg.Connection[Any], table: str) -> list[int]:
    query = sql.SQL("SELECT value FROM {} WHERE name = 'relay_published_total'").format(
        sql.Identifier(table)
    )
    return [row[0] for row in conn.execute(query)]


def test_migrate_outbox__in_a_project_without_jobs__migrates_counts_and_imports_no_jobs(
    database: dict[str, Any],
) -> None:
    done = _run("tests.settings_outbox_alone", database, "manage.py", "migrate", "outbox")

    assert "Applying outbox.0003_counter... OK" in done.stdout
    with psycopg.connect(**database, autocommit=True) as conn:
        tables = _tables(conn)
        assert {"outbox_outboxentry", "outbox_counter"} <= tables
        assert not {t for t in tables if t.startswith("jobs_")}
        assert _mark_new_rows(conn, 2) == 2
        assert _counter(conn, "outbox_counter") == [2]
    imported = _run("tests.settings_outbox_alone", database, "-c", IMPORT_ALL)
    assert json.loads(imported.stdout.strip().splitlines()[-1]) == []


def test_migrate__a_database_at_the_previous_head__keeps_relay_published_total(
    database: dict[str, Any],
) -> None:
    """jobs 0015 and outbox 0002 with the mark of that time, which counted in jobs_signal;
    then `migrate`: the count moves to outbox_counter and goes on from there (jobs_signal is
    jobs_counter since jobs 0019)."""
    _run("jobsite.settings", database, "-m", "django", "migrate", "jobs", "0015")
    _run("jobsite.settings", database, "-m", "django", "migrate", "outbox", "0002")
    with psycopg.connect(**database, autocommit=True) as conn:
        conn.execute(MARK_AT_PREVIOUS_HEAD)
        assert _mark_new_rows(conn, 3) == 3
        assert _counter(conn, "jobs_signal") == [3]

    done = _run("jobsite.settings", database, "-m", "django", "migrate")

    assert "Applying outbox.0003_counter... OK" in done.stdout
    assert "Applying jobs.0016_relay_published_to_outbox... OK" in done.stdout
    with psycopg.connect(**database, autocommit=True) as conn:
        assert _counter(conn, "outbox_counter") == [3]
        assert _counter(conn, "jobs_counter") == []
        assert _mark_new_rows(conn, 1) == 1
        assert _counter(conn, "outbox_counter") == [4]
        assert _counter(conn, "jobs_counter") == []
