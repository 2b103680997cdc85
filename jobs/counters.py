"""Cross-process counters of rare events, kept in the database so every process agrees.

Hot-path facts (accepted, completed, backlog) are read from the job table at scrape time;
these counters are for events no row records: duplicate deliveries, stale writes rejected,
effects reused, expired leases, incompatible deployments, and the finished jobs the pruner
deleted (by end state: the metrics add them back to the rows' counts, so the accepted and
completed totals do not go down when retention deletes history).
"""

from __future__ import annotations

import logging

from django.db import connection

from . import prepared

logger = logging.getLogger(__name__)

DUPLICATE_DELIVERIES = "duplicate_deliveries_total"
DUPLICATE_EFFECTS = "duplicate_effects_total"
STALE_WRITES_REJECTED = "stale_writes_rejected_total"
EFFECTS_REUSED = "effects_reused_total"
EXPIRED_LEASES = "expired_leases_total"
INCOMPATIBLE_DEPLOYMENT = "incompatible_deployment_total"
DEFERRED_DELIVERIES = "deferred_deliveries_total"
REDELIVERED = "redelivered_total"  # published again past the delivery deadline
PRUNED = "pruned_total"  # label: the end state; added in the pruner's own transaction

_UPSERT = "SELECT jobs_counter_add(%s::text, %s::text, %s::bigint)"  # an upsert (jobs 0018)


def counter_increment(name: str, *, label: str = "", by: int = 1) -> None:
    """Add `by` to a counter. It commits and rolls back with the caller's transaction: call it
    outside one for an event that happened whatever the transaction does, inside one for what
    that transaction itself does (the pruner's deletes)."""
    if by <= 0:
        return
    prepared.fetchone(_UPSERT, [name, label, by])


def counter_values() -> dict[tuple[str, str], int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, label, value FROM jobs_counter")
        return {(name, label): value for name, label, value in cursor.fetchall()}


def counter_value(name: str, *, label: str = "") -> int:
    return counter_values().get((name, label), 0)
