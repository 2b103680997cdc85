"""Storage cost of one job (issue 28): bytes in every jobs_* and outbox_* table and index, per
job that ran, and what retention brings the tables back to.

One round: the tables emptied (bench/backlog.py's start: HISTORY finished jobs, VACUUM), sizes
taken; N noop jobs submitted by `jobs.submit_many` and drained by a real worker (the batch
path, as bench/backlog.py); VACUUM (not FULL: what autovacuum does), sizes again; then every
finished job pruned (`jobs.retention.jobs_prune`, as the beat task would once they are past
JOBS_RETENTION_SECONDS) and the published outbox rows pruned (`outbox.services.outbox_prune`),
VACUUM, sizes a third time. Bytes per job = growth / N, per table with its indexes and TOAST.
Sizes are pages PostgreSQL holds (8 kB each), so a table's share below a page per job is an
average over many jobs; a VACUUM keeps the file's pages (free for new rows), which is why the
third size is "what the tables hold", not what the disk gives back: that takes VACUUM FULL or
pg_repack, which a steady state never needs (pruned space is reused by the next jobs).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bench.backlog import BROKER_DB, durable_drain, empty_database
from bench.infra import db_name, ensure_database, pg_connect
from bench.scenarios import Bench, bench_owner, close_driver_db, log, use_target

_SIZES_SQL = r"""
SELECT c.relname,
       pg_table_size(c.oid) AS table_bytes,
       pg_indexes_size(c.oid) AS index_bytes,
       s.n_live_tup
FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE s.schemaname = current_schema() AND (c.relname LIKE 'jobs\_%' OR c.relname LIKE 'outbox\_%')
ORDER BY c.relname
"""


def sizes(db: str) -> dict[str, dict[str, int]]:
    """Each jobs_*/outbox_* table: its bytes (heap and TOAST), its indexes' bytes, live rows."""
    with pg_connect(db) as conn:
        conn.execute("VACUUM (ANALYZE)")
        rows = conn.execute(_SIZES_SQL).fetchall()
    return {
        name: {"table": int(table), "indexes": int(index), "rows": int(live)}
        for name, table, index, live in rows
    }


def _growth(after: dict[str, dict[str, int]], before: dict[str, dict[str, int]], n: int) -> Any:
    out = {}
    for name, now in after.items():
        then = before.get(name, {"table": 0, "indexes": 0, "rows": 0})
        table = (now["table"] - then["table"]) / n
        index = (now["indexes"] - then["indexes"]) / n
        rows = (now["rows"] - then["rows"]) / n
        if table or index or rows:
            out[name] = {"table": table, "indexes": index, "rows": rows, "total": table + index}
    return out


def prune_everything(db: str) -> dict[str, int]:
    """Every finished job and every published outbox row, as retention would after its time."""
    from jobs.retention import jobs_prune
    from outbox.services import outbox_prune

    jobs = jobs_prune(older_than=timedelta(microseconds=1), budget_seconds=None)
    outbox = outbox_prune(older_than=timedelta(microseconds=1))
    close_driver_db()
    return {"jobs": jobs.deleted, "kept": jobs.kept, "outbox_rows": outbox}


def scenario_storage(b: Bench) -> dict[str, Any]:
    db = db_name("backlog")
    ensure_database(db)
    use_target(db, b.broker(BROKER_DB))
    owner = bench_owner()
    n = b.backlog
    empty_database(db, owner.pk)
    close_driver_db()
    before = sizes(db)
    # durable_drain empties the tables again first: the same start as `before`.
    durable_drain(b, db, owner, n, 2, analyze=False, name="storage")
    close_driver_db()
    after = sizes(db)
    pruned = prune_everything(db)
    retained = sizes(db)
    use_target(db_name("main"), b.broker())
    per_job = _growth(after, before, n)
    total = sum(t["total"] for t in per_job.values())
    left = sum(t["table"] + t["indexes"] for t in retained.values()) - sum(
        t["table"] + t["indexes"] for t in before.values()
    )
    log(f"  storage: {total:,.0f} bytes per job over {n:,} jobs; pruned {pruned}")
    for name, t in sorted(per_job.items(), key=lambda kv: -kv[1]["total"]):
        log(
            f"    {name:32s} {t['total']:8.0f} B/job (table {t['table']:.0f}, "
            f"indexes {t['indexes']:.0f}, {t['rows']:.2f} rows/job)"
        )
    return {
        "jobs": n,
        "bytes_per_job": total,
        "by_table": per_job,
        "pruned": pruned,
        "rows_left_after_prune": {
            name: t["rows"] - before[name]["rows"]
            for name, t in retained.items()
            if t["rows"] != before[name]["rows"]
        },
        "bytes_kept_after_prune_per_job": left / n,
    }
