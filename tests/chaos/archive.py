"""The chaos soak's archive of pruned rows, so the checker still sees every job with pruning on.

`install()` adds, in the soak's private database only, a copy table per table the pruners
delete from (`chaos_pruned_<table>`, the same columns) and an AFTER DELETE row trigger that
copies each deleted row there, plus `chaos_prune_log`: a pruned job's state, its finish and
the time it went (its transaction's, so the rows of one batch share it). `Rows(archived=True)`
reads live and archived rows together, as the checker needs them; `Rows()` the live ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Table -> its archive. The outbox's rows are archived to be counted.
ARCHIVED = {
    "jobs_job": "chaos_pruned_job",
    "jobs_jobevent": "chaos_pruned_jobevent",
    "jobs_effectledgerentry": "chaos_pruned_effectledgerentry",
    "jobs_jobdependency": "chaos_pruned_jobdependency",
    "outbox_outboxentry": "chaos_pruned_outboxentry",
}

_FUNCTION = """
CREATE OR REPLACE FUNCTION chaos_archive() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO %I SELECT ($1).*', TG_ARGV[0]) USING OLD;
    IF TG_TABLE_NAME = 'jobs_job' THEN
        INSERT INTO chaos_prune_log (job_id, state, finished_at, pruned_at)
        VALUES (OLD.id, OLD.state, OLD.finished_at, now());
    END IF;
    RETURN NULL;
END;
$$;
"""


def install() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS chaos_prune_log (job_id uuid PRIMARY KEY, "
            "state text NOT NULL, finished_at timestamptz, pruned_at timestamptz NOT NULL)"
        )
        cursor.execute(_FUNCTION)
        for table, archive in ARCHIVED.items():
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {archive} (LIKE {table})")
            cursor.execute(f"DROP TRIGGER IF EXISTS chaos_archive ON {table}")
            cursor.execute(
                f"CREATE TRIGGER chaos_archive AFTER DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION chaos_archive('{archive}')"
            )


@dataclass(frozen=True)
class PrunedJob:
    job_id: str
    state: str
    finished_at: Any
    pruned_at: Any


@dataclass(frozen=True)
class Rows:
    """The rows the checker reads: the live tables, and with `archived` the pruned ones too."""

    archived: bool = False

    def _union(self, table: str, order: str = "") -> str:
        sql = f"SELECT * FROM {table}"
        if self.archived:
            sql += f" UNION ALL SELECT * FROM {ARCHIVED[table]}"
        return f"{sql} ORDER BY {order}" if order else sql

    def jobs(self) -> list[Any]:
        from jobs.models import Job

        return list(Job.objects.raw(self._union("jobs_job")))

    def events(self) -> Iterator[Any]:
        from jobs.models import JobEvent

        return iter(JobEvent.objects.raw(self._union("jobs_jobevent", "id")))

    def ledger(self) -> list[Any]:
        from jobs.models import EffectLedgerEntry

        return list(EffectLedgerEntry.objects.raw(self._union("jobs_effectledgerentry")))

    def edges(self) -> list[tuple[str, str]]:
        """(waiter, dependency) of every dependency edge."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT waiter_id, dependency_id FROM ({self._union('jobs_jobdependency')}) d"
            )
            return [(str(w), str(d)) for w, d in cursor.fetchall()]

    def business_keys(self, prefix: str) -> list[str]:
        """The business keys of every job whose key starts with `prefix`."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT business_key FROM ({self._union('jobs_job')}) j "
                "WHERE starts_with(business_key, %s)",
                [prefix],
            )
            return [str(key) for (key,) in cursor.fetchall()]

    def pruned(self) -> list[PrunedJob]:
        if not self.archived:
            return []
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SELECT job_id, state, finished_at, pruned_at FROM chaos_prune_log")
            return [PrunedJob(str(j), s, f, p) for j, s, f, p in cursor.fetchall()]

    def pruned_counts(self) -> dict[str, int]:
        """Rows pruned per table (empty without the archive). Of the outbox, the published
        rows: an unpublished dormant row is deleted when its waiting job is cancelled."""
        if not self.archived:
            return {}
        from django.db import connection

        counts = {}
        with connection.cursor() as cursor:
            for table, archive in ARCHIVED.items():
                pruned = " WHERE published_at IS NOT NULL" if table == "outbox_outboxentry" else ""
                cursor.execute(f"SELECT count(*) FROM {archive}{pruned}")
                counts[table] = int(cursor.fetchone()[0])
        return counts
