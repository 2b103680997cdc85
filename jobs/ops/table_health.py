"""Table health: dead tuples of the hot tables and what holds the xmin horizon back.

A PostgreSQL-backed queue rarely dies of a crash; it dies of MVCC. Every claim, heartbeat
and completion updates a job row, every publish an outbox row, and each update leaves a dead
tuple that only VACUUM reclaims, and VACUUM may reclaim only what no snapshot can still see.
One long transaction anywhere in the cluster (a report, a `pg_dump`, a session left idle in
a transaction, a replication slot or a prepared transaction nobody finished) pins that
horizon: dead tuples pile up in jobs_job, jobs_jobevent and outbox_outboxentry, their index
scans slow down, and throughput falls over hours (Brandur Leach, "Postgres Job Queues &
Failure By MVCC"). These readings say it is happening, and who holds it.

Read from PostgreSQL's statistics views at scrape time (`/metrics`, `/ops/`): no table of
ours is read. Seeing other roles' sessions takes `pg_read_all_stats` (or `pg_monitor`);
without it, a horizon held by another role's session shows only through the dead tuples.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db import connection
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "jobs_"

# The library's tables: both apps' (jobs_*, outbox_*), in the connection's schema.
_TABLES_SQL = r"""
SELECT relname, n_live_tup, n_dead_tup, pg_total_relation_size(relid),
       pg_indexes_size(relid), extract(epoch FROM clock_timestamp()
           - greatest(last_autovacuum, last_vacuum))
FROM pg_stat_user_tables
WHERE schemaname = current_schema() AND (relname LIKE 'jobs\_%' OR relname LIKE 'outbox\_%')
ORDER BY relname
"""

# Whatever holds the oldest xmin: a session's snapshot (its transaction's start as its age
# in seconds), a replication slot or a prepared transaction; the scrape's own session aside.
_HORIZON_SQL = """
SELECT holder, detail, xmin_age, seconds FROM (
    SELECT 'session' AS holder,
           concat_ws(' ', 'pid ' || pid, usename, nullif(application_name, ''), state)
               AS detail,
           age(backend_xmin) AS xmin_age,
           extract(epoch FROM clock_timestamp() - xact_start) AS seconds
    FROM pg_stat_activity
    WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
    UNION ALL
    SELECT 'replication slot', slot_name::text,
           greatest(age(xmin), age(catalog_xmin)), NULL
    FROM pg_replication_slots
    WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
    UNION ALL
    SELECT 'prepared transaction', gid, age(transaction),
           extract(epoch FROM clock_timestamp() - prepared)
    FROM pg_prepared_xacts
) holders
ORDER BY xmin_age DESC NULLS LAST
LIMIT 1
"""


@dataclass(frozen=True)
class TableHealth:
    """One table's tuples and size, from PostgreSQL's statistics (estimates, not counts)."""

    table: str
    live: int
    dead: int
    total_bytes: int
    index_bytes: int
    since_vacuum_s: float | None  # None: never vacuumed since the statistics were reset


@dataclass(frozen=True)
class Horizon:
    """What holds the oldest xmin of the cluster, seen from this database's connection."""

    holder: str  # session, replication slot, prepared transaction
    detail: str
    xmin_age: int  # transactions since its xmin
    seconds: float | None  # how long it has held it (None: a slot has no start time)


def table_health() -> list[TableHealth]:
    """The jobs_* and outbox_* tables of the connection's schema, by name."""
    with connection.cursor() as cursor:
        cursor.execute(_TABLES_SQL)
        return [
            TableHealth(name, int(live), int(dead), int(total), int(index), _float(since))
            for name, live, dead, total, index, since in cursor.fetchall()
        ]


def horizon() -> Horizon | None:
    """The oldest xmin holder, or None when nothing but this scrape holds one."""
    with connection.cursor() as cursor:
        cursor.execute(_HORIZON_SQL)
        row = cursor.fetchone()
    if row is None:
        return None
    holder, detail, xmin_age, seconds = row
    return Horizon(holder, detail or "", int(xmin_age), _float(seconds))


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


class TableHealthCollector(Collector):
    """`jobs_table_*{table}` and `jobs_xmin_horizon_*` on every collect()."""

    def collect(self) -> Iterator[Metric]:
        tables = table_health()
        families = {
            "live": ("table_live_tuples", "Live tuples of a jobs_*/outbox_* table (estimate)."),
            "dead": ("table_dead_tuples", "Dead tuples VACUUM has not reclaimed yet (estimate)."),
            "total_bytes": ("table_size_bytes", "A table's size with its indexes and TOAST."),
        }
        for attr, (name, doc) in families.items():
            family = GaugeMetricFamily(PREFIX + name, doc, labels=["table"])
            for table in tables:
                family.add_metric([table.table], getattr(table, attr))
            yield family
        held = horizon()
        yield GaugeMetricFamily(
            PREFIX + "xmin_horizon_age_seconds",
            "How long the oldest transaction, slot or prepared transaction has held the xmin "
            "horizon back (0: none but the scrape, or a replication slot, which has no start "
            "time: see jobs_xmin_horizon_age_transactions).",
            value=(held.seconds or 0.0) if held else 0.0,
        )
        yield GaugeMetricFamily(
            PREFIX + "xmin_horizon_age_transactions",
            "Transactions since the oldest held xmin: what VACUUM may not yet reclaim.",
            value=held.xmin_age if held else 0,
        )
