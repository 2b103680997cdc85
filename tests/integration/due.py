"""What a job's outbox row is due at (outbox.services.outbox_entry_new)."""

from __future__ import annotations

from datetime import datetime

from outbox.models import OutboxEntry


def assert_due_at(row: OutboxEntry, when: datetime | None) -> None:
    """`row` is due at `when`, or at its own creation when `when` had already passed by then
    (a row is never due before it exists)."""
    assert when is not None
    assert row.available_at == when or when < row.available_at <= row.created_at, (
        row.available_at,
        when,
        row.created_at,
    )
