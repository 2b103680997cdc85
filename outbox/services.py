"""Writes to the outbox. Every enqueue rides on the caller's transaction."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from jobs.exceptions import OutboxOutsideTransaction

from .models import OutboxEntry


def outbox_enqueue(
    *,
    task_name: str,
    queue: str,
    job_id: UUID | None = None,
    kwargs: dict[str, Any] | None = None,
    available_at: datetime | None = None,
    fast_path: bool | None = None,
) -> OutboxEntry:
    """Record an intent to publish; it commits (or rolls back) with the caller's rows.

    With the fast path, the row is reserved for this process and published right after the
    commit; if this process dies first, the reservation lapses and the relay publishes it.
    """
    if not connection.in_atomic_block:
        raise OutboxOutsideTransaction(
            "outbox_enqueue must run inside transaction.atomic(), with the rows it announces"
        )
    now = timezone.now()
    due = available_at or now
    use_fast_path = settings.OUTBOX_FAST_PATH if fast_path is None else fast_path
    use_fast_path = use_fast_path and due <= now
    entry = OutboxEntry.objects.create(
        task_name=task_name,
        queue=queue,
        job_id=job_id,
        kwargs=kwargs or {},
        available_at=due,
        reserved_until=(
            now + timedelta(seconds=settings.OUTBOX_RESERVATION_SECONDS) if use_fast_path else None
        ),
    )
    if use_fast_path:
        from .relay import outbox_publish_after_commit

        entry_id = entry.id
        transaction.on_commit(lambda: outbox_publish_after_commit([entry_id]))
    return entry


def outbox_prune(*, older_than: timedelta | None = None, batch: int = 5000) -> int:
    """Delete published rows past retention, in batches; returns how many went."""
    cutoff = timezone.now() - (older_than or timedelta(seconds=settings.OUTBOX_RETENTION_SECONDS))
    total = 0
    while True:
        ids = list(
            OutboxEntry.objects.filter(published_at__lt=cutoff).values_list("id", flat=True)[:batch]
        )
        if not ids:
            return total
        total += OutboxEntry.objects.filter(id__in=ids).delete()[0]
