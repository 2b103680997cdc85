"""Statements on jobs_job kept on the right index, whatever the planner's statistics say.

The maintenance checks walk the active jobs by a key from a floor (outbox.floors): the
claimable jobs by `next_attempt_at` (`jobs_job_due_idx`), the leased ones by `lease_until`
(`jobs_job_lease_expiry_idx`). Their conditions (`state IN ('queued', 'retry_wait')`,
`state = 'leased'`) also prove the condition of `jobs_job_active_created_idx` (every active
state, keyed by `created_at`). With statistics from a quiet moment the planner estimates one
row either way, so a walk of that index whole, filtered and sorted, costs it no more than the
walk from the floor, and it sometimes picks it. Under a held xmin horizon that index keeps an
entry for every job that was active since the horizon was held: in the soak's hold, the
redelivery check's three walks and the reconciler's count of expired leases took 100-210 ms
each instead of a few (docs/benchmarks.md, the soak runs' note).

Two tools, one for each kind of statement:

`in_states(rows, states)` is for rows looked up by id with a state guard (a fenced write, a
transition, a window of ids): it says "in one of these states" through `concat(state)`, an
identity the planner does not see through, so no partial index's condition follows from the
statement and the ids are looked up by primary key. With the plain `state = 'leased'`, a
fenced write of one row was planned on `jobs_job_active_created_idx` whole, filtered by id
(tests/integration/test_walk_plans.py), as the outbox's marks were on its due index
(`outbox.relay.outbox_unpublished`, outbox migration 0006).

`in_index_order()` turns explicit sorts off (`enable_sort`, for the enclosed statements of the
transaction only), so a statement whose ORDER BY is a walk's key can only be planned on the
index that yields that order: an incremental sort (the window's `(next_attempt_at, id)`) is
still allowed. A statement with no index in that order still runs (the planner keeps a
disabled plan when it has no other). Tests: tests/integration/test_walk_plans.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import cast

from django.db import connection, models, transaction
from django.db.models import F, Func, QuerySet


def in_states[M: models.Model](rows: QuerySet[M], states: Iterable[str]) -> QuerySet[M]:
    """`rows` (picked by id) narrowed to `states`, without proving any partial index's
    condition (module docstring)."""
    seen = Func(F("state"), function="concat", output_field=models.TextField())
    narrowed = rows.alias(state_seen=seen).filter(state_seen__in=list(states))
    return cast("QuerySet[M]", narrowed)  # django-stubs type alias()'s rows as Model


@contextmanager
def in_index_order() -> Iterator[None]:
    """The enclosed statements are planned without explicit sorts (module docstring). In the
    caller's transaction (no savepoint: a row a walk locks stays locked by it), or in one of
    their own outside any; the setting goes back at the end, or with the transaction's
    rollback after an error."""
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('enable_sort'), set_config('enable_sort', 'off', true)"
        )
        (previous, _) = cursor.fetchone()
        yield
        cursor.execute("SELECT set_config('enable_sort', %s, true)", [previous])
