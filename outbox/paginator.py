"""A paginator for huge tables: never COUNT(*) over the whole job table on a list page."""

from __future__ import annotations

import json
from functools import cached_property

from django.db import connection
from django.db.models import Model, QuerySet

from .generics import Paginator

EXACT_BELOW = 10_000


def _table_estimate(table: str) -> int:
    """The planner's row estimate from pg_class (updated by autovacuum/ANALYZE)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [table])
        row = cursor.fetchone()
    return max(int(row[0]) if row else 0, 0)


def _plan_estimate(queryset: QuerySet[Model]) -> int:
    """Rows the planner expects for a filtered queryset (EXPLAIN, no execution)."""
    sql, params = queryset.order_by().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


class EstimatedCountPaginator[M: Model](Paginator[M]):
    """Exact counts while small; past EXACT_BELOW rows, the planner's estimate.

    Unfiltered: pg_class.reltuples. Filtered: a bounded count (LIMIT EXACT_BELOW+1) and, when
    that hits the bound, the EXPLAIN estimate. Page links near the end may be approximate.
    """

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        if not queryset.query.where:
            estimate = _table_estimate(queryset.model._meta.db_table)
            if estimate >= EXACT_BELOW:
                return estimate
        bounded = queryset.order_by().values("pk")[: EXACT_BELOW + 1].count()
        if bounded <= EXACT_BELOW:
            return bounded
        return max(_plan_estimate(queryset), bounded)
