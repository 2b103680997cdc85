"""Writes to the outbox. Every enqueue rides on the caller's transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from .breaker import breaker
from .conf import outbox_settings
from .exceptions import OutboxOutsideTransaction
from .models import OutboxEntry


def outbox_entry_new(
    *,
    task_name: str,
    queue: str,
    job_id: UUID | None = None,
    kwargs: dict[str, Any] | None = None,
    available_at: datetime | None = None,
    fast_path: bool | None = None,
    priority: int = 0,
) -> OutboxEntry:
    """An unsaved outbox row, due at `available_at` (else now; a time already past is now:
    a row is never due before it exists, so the relay's scan floor is under it, outbox.floors),
    reserved for this process's fast path as `outbox_reserved_until` says; under a backlog the
    relay publishes higher `priority` first (outbox.relay)."""
    now = timezone.now()
    due = max(available_at, now) if available_at is not None else now
    return OutboxEntry(
        task_name=task_name,
        queue=queue,
        job_id=job_id,
        kwargs=kwargs or {},
        priority=priority,
        available_at=due,
        reserved_until=outbox_reserved_until(due=due, now=now, fast_path=fast_path),
    )


def outbox_reserved_until(
    *, due: datetime, now: datetime, fast_path: bool | None = None
) -> datetime | None:
    """The `reserved_until` of a row written at `now`, due at `due`: with the fast path
    (`fast_path`, else OUTBOX_FAST_PATH) and due now, the row is reserved for the writing
    process, which publishes it right after the commit (`outbox_after_commit`); if that process
    dies first, the reservation lapses and the relay publishes it. None: the relay's at once
    (also while this process's fast path is paused, the broker down: outbox.breaker)."""
    if not (outbox_settings.FAST_PATH if fast_path is None else fast_path) or due > now:
        return None
    if breaker.paused():  # the broker is down: the relay's at once (outbox.breaker)
        return None
    return now + timedelta(seconds=outbox_settings.RESERVATION_SECONDS)


# While `outbox_publish_together()` is active in this thread: the rows whose transaction
# committed, published together when it ends.
_together: ContextVar[list[OutboxEntry] | None] = ContextVar("outbox_together", default=None)


def outbox_after_commit(entry: OutboxEntry) -> None:
    """Fast path for a saved row reserved by `outbox_entry_new`: publish it once its
    transaction commits (now, if it was written by a statement that committed itself)."""
    outbox_after_commit_many([entry])


def outbox_after_commit_many(entries: list[OutboxEntry]) -> None:
    """`outbox_after_commit` for many saved rows: one publish call after the commit, which
    packs them into batch messages where a rule allows (outbox.batching)."""
    reserved = [entry for entry in entries if entry.reserved_until is not None]
    if not reserved:
        return
    together = _together.get()
    if together is not None:
        publish: Callable[[], None] = lambda: together.extend(reserved)  # noqa: E731
    else:
        from .relay import outbox_publish_after_commit

        publish = lambda: outbox_publish_after_commit(reserved)  # noqa: E731
    if connection.in_atomic_block:
        transaction.on_commit(publish)  # dropped if its transaction or savepoint rolls back
    else:
        publish()


@contextmanager
def outbox_publish_together() -> Iterator[None]:
    """Rows written inside (by any number of `outbox_save` calls, in one or more
    transactions) are published by ONE call once they committed, so the relay's packing
    applies to them: a worker's group commit that schedules several retries sends them in
    batch messages, not one message each. A row of a rolled-back transaction or savepoint is
    never published (its on-commit hook is dropped). Ending inside an outer transaction, the
    publish waits for that transaction's commit."""
    if _together.get() is not None:
        yield  # already collecting: the outermost block publishes
        return
    collected: list[OutboxEntry] = []
    token = _together.set(collected)
    try:
        yield
    finally:
        _together.reset(token)

    def flush() -> None:
        if collected:
            from .relay import outbox_publish_after_commit

            outbox_publish_after_commit(list(collected))

    if connection.in_atomic_block:
        transaction.on_commit(flush)  # after the rows' own hooks, registered before it
    else:
        flush()


def outbox_save(entry: OutboxEntry) -> OutboxEntry:
    """Save a new row in the caller's transaction; it commits (or rolls back) with their rows."""
    if not connection.in_atomic_block:
        raise OutboxOutsideTransaction(
            "outbox_enqueue must run inside transaction.atomic(), with the rows it announces"
        )
    entry.save()
    outbox_after_commit(entry)
    return entry


def outbox_enqueue(**fields: Any) -> OutboxEntry:
    """Record an intent to publish (`outbox_entry_new(**fields)`); it commits (or rolls back)
    with the caller's rows."""
    return outbox_save(outbox_entry_new(**fields))


def outbox_prune(*, older_than: timedelta | None = None, batch: int = 5000) -> int:
    """Delete published rows past retention, in batches; returns how many went.

    A job's newest row stays, however old: while the job is due it is the reconciler's and
    the redelivery check's proof that the job had a message (pruned, a message the broker
    lost would never be sent again); it goes with the job (jobs.retention)."""
    cutoff = timezone.now() - (older_than or timedelta(seconds=outbox_settings.RETENTION_SECONDS))
    newer = OutboxEntry.objects.filter(job_id=OuterRef("job_id"), id__gt=OuterRef("id"))
    old = OutboxEntry.objects.filter(published_at__lt=cutoff).filter(
        Q(job_id__isnull=True) | Exists(newer)
    )
    total = 0
    while True:
        ids = list(old.values_list("id", flat=True)[:batch])
        if not ids:
            return total
        total += OutboxEntry.objects.filter(id__in=ids).delete()[0]
