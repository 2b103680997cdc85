"""Scan floors: where a periodic scan of a queue index may start, so a held xmin horizon
costs it the last seconds of churn instead of everything since the horizon was held.

The periodic scans (the relay's sweep, the reaper, the redelivery check) read a partial index
in key order from its oldest entry: due outbox rows by `available_at`, claimable jobs by
`next_attempt_at`, leases by `lease_until`. A row that leaves the index (a row published, a
job claimed or finished) leaves its old entry behind until VACUUM removes the old version,
and VACUUM cannot while any transaction in the database holds the xmin horizon back (a
report, `pg_dump`, a session idle in transaction); nor can a scan mark the entry dead for the
next one. So each scan walks every row version that left the index since the horizon was
held before it reaches a live one: after 4 minutes at 1,000 jobs a second, 30-70 ms a scan,
growing for as long as the horizon is held (docs/benchmarks.md, "A day of load").

A floor is a key under which the scan has nothing to find, kept per process; the scan adds
`key >= floor` and its index walk starts there. Two kinds:

- `MinFloor`: the oldest key among the index's live rows, found by the same index from the
  previous floor (a walk over the churn since then only);
- `SweptFloor`: where the previous complete scan ended (the reaper: a lease that ended
  before its last complete run was reaped then).

Both are lowered by `OUTBOX_SCAN_FLOOR_MARGIN_SECONDS`, for rows that commit after the floor
was taken with a key below it (a key is its writer's clock when it built the row, before its
commit; hosts' clocks differ a little). Every `OUTBOX_SCAN_FLOOR_FULL_SECONDS` a scan walks
from the start of its index, so a row under the floor anyway (a commit later than the margin,
a row a scan skipped because another transaction held its lock) is found within that time. A
floor only costs a scan rows it could have skipped: a stale or forked copy is lower, never
wrong.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from .conf import outbox_settings


def _margin() -> timedelta:
    return timedelta(seconds=outbox_settings.SCAN_FLOOR_MARGIN_SECONDS)


class _Floor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._floor: datetime | None = None
        self._full_at = -float("inf")

    def _known(self) -> datetime | None:
        """The floor, or None when none is known or a walk from the start is due."""
        with self._lock:
            if time.monotonic() - self._full_at >= outbox_settings.SCAN_FLOOR_FULL_SECONDS:
                return None
            return self._floor

    def _keep(self, floor: datetime, *, full: bool, at: float) -> None:
        with self._lock:  # two threads' floors are both bounds: the last one stays
            self._floor = floor
            if full:
                self._full_at = at

    def reset(self) -> None:
        """Forget the floor: the next scan walks its index from the start."""
        with self._lock:
            self._floor, self._full_at = None, -float("inf")


class MinFloor(_Floor):
    """The oldest `key` of `rows()` (the index's live rows: its partial condition) less the
    margin (see the module docstring)."""

    def __init__(self, rows: Callable[[], QuerySet[Any]], key: str) -> None:
        super().__init__()
        self._rows, self._key = rows, key

    def _oldest(self, after: datetime | None) -> datetime | None:
        rows = self._rows()
        if after is not None:
            rows = rows.filter(**{f"{self._key}__gte": after})
        oldest: datetime | None = rows.order_by(self._key).values_list(self._key, flat=True).first()
        return oldest

    def bound(self) -> datetime:
        """The key the next scan may start at, found again now."""
        started, now = time.monotonic(), timezone.now()
        after = self._known()
        oldest = self._oldest(after)
        floor = (now if oldest is None else min(oldest, now)) - _margin()
        self._keep(floor, full=after is None, at=started)
        return floor


class SweptFloor(_Floor):
    """Where the last complete scan ended, less the margin (see the module docstring)."""

    def bound(self) -> datetime | None:
        """The key the next scan may start at; None: from the start of the index."""
        return self._known()

    def swept(self, upto: datetime, *, walked_from: datetime | None, started: float) -> None:
        """A scan that began at monotonic `started`, from `walked_from` (its bound), found
        every row under `upto`: the next ones may start there."""
        self._keep(upto - _margin(), full=walked_from is None, at=started)
