"""The relay: turn committed outbox rows into broker messages, at least once.

Protocol of `outbox_relay_batch` (what a crash at each step leaves behind):
  1. Reserve: in one transaction, lock due unpublished rows with SKIP LOCKED (a share of
     the oldest, the rest by priority: `_reserve`), stamp `reserved_until` and a token of
     this reservation (`reserved_by`) and count the attempt; commit. A crash after this
     leaves rows reserved; when the reservation lapses another relay takes them. Nothing is
     lost. A reservation whose answer this process did not get (a connection lost at the
     commit, a failover) may have committed: its next reservation takes the rows of that
     token back at once instead of waiting for them to lapse.
  2. Publish every reserved row over one broker connection, holding no row lock; rows of a
     task with a batch rule share messages (outbox.batching). A crash
     here leaves some messages published and their rows still unpublished.
  3. Mark the published rows in one UPDATE. A crash between 2 and 3 makes the next relay
     publish those rows again: a duplicate message, which the worker's claim absorbs.
  4. Rows whose publish failed get their reservation cleared and `available_at` pushed back
     (capped exponential), so one bad row never blocks the others. A failure on the broker
     connection fails the rest of the call at once (`BROKER_DOWN`): under an outage a call
     costs one connect and one UPDATE, not a connect and retries per message.
Two relays (or two beats) at once are safe: SKIP LOCKED plus reservations split the rows.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Func, IntegerField, Q, QuerySet
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError

from . import marks
from .batching import messages_of
from .breaker import breaker
from .conf import outbox_settings
from .failpoints import failpoint
from .fastpath import publish_combined
from .floors import MinFloor
from .marks import outbox_mark_published
from .models import OutboxEntry
from .tracing import publish_traced
from .transport import celery_app, task_sender

logger = logging.getLogger(__name__)

# A send that fails with one of these failed on the broker connection (kombu raises its
# OperationalError once its connect and retries are spent; a socket error may escape as
# itself): the broker is unreachable, so the rest of the call is not tried. Any other error
# (a message that cannot be encoded) fails its own message only.
BROKER_DOWN: tuple[type[BaseException], ...] = (BrokerOperationalError, OSError)


@dataclass
class RelayResult:
    reserved: int = 0
    published: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


# Tokens of this process's reservations that raised instead of answering: each may have
# committed. A thread's next reservation takes their rows back (a handful at most: the oldest
# go once their rows' reservations have lapsed anyway).
_unanswered: list[uuid.UUID] = []
_unanswered_lock = threading.Lock()
UNANSWERED_KEPT = 8


def outbox_reserve_due(*, limit: int) -> list[OutboxEntry]:
    """Step 1: reserve due, unreserved, unpublished rows (and the rows of this process's
    reservations that never answered); commit before returning."""
    token = uuid.uuid4()
    with _unanswered_lock:
        rescue = list(_unanswered)
    try:
        rows = _reserve(limit=limit, token=token, rescue=rescue)
    except BaseException:
        with _unanswered_lock:
            _unanswered.append(token)
            del _unanswered[:-UNANSWERED_KEPT]
        raise
    with _unanswered_lock:  # their rows, if any committed, are this reservation's now
        _unanswered[:] = [t for t in _unanswered if t not in rescue]
    return rows


# Under a backlog, one row in OLDEST_SHARE of each reservation is among the oldest due rows,
# whatever their priority: the rest go by priority (docs/architecture.md, "Priorities").
OLDEST_SHARE = 4
_RESERVED_FIELDS = ("id", "task_name", "queue", "kwargs", "priority", "publish_attempts")


def reservation_split(limit: int) -> tuple[int, int]:
    """(oldest, by priority): how many rows of a reservation of `limit` go by age, how many
    by priority; the oldest share is at least one row."""
    oldest = max(1, math.ceil(limit / OLDEST_SHARE))
    return oldest, limit - oldest


# Where the sweep's walk of the due indexes starts (outbox.floors): the oldest unpublished
# row (reserved and future ones included: they may become due). Under a held xmin horizon,
# without it, every sweep walks every row published since the horizon was held.
due_floor = MinFloor(lambda: OutboxEntry.objects.filter(published_at__isnull=True), "available_at")


def _reserve(*, limit: int, token: uuid.UUID, rescue: list[uuid.UUID]) -> list[OutboxEntry]:
    """The rows of a reservation: first the oldest due rows (`reservation_split`); when they
    fill their share, there may be more due rows than the limit (a backlog), and the rest
    of the limit goes to the due rows of the highest priority, oldest first. Rows under the
    due floor are left to a later sweep's full walk (outbox.floors)."""
    floor = due_floor.bound()
    now = timezone.now()
    free = Q(reserved_until__isnull=True) | Q(reserved_until__lt=now)
    if rescue:
        free |= Q(reserved_by__in=rescue)
    oldest_limit, by_priority_limit = reservation_split(limit)
    with transaction.atomic():
        due = OutboxEntry.objects.select_for_update(skip_locked=True).filter(
            free, published_at__isnull=True, available_at__lte=now, available_at__gte=floor
        )
        rows = list(due.order_by("available_at", "id").only(*_RESERVED_FIELDS)[:oldest_limit])
        if len(rows) == oldest_limit and by_priority_limit:
            rows += (
                due.exclude(id__in=[row.id for row in rows])
                .order_by("-priority", "available_at", "id")
                .only(*_RESERVED_FIELDS)[:by_priority_limit]
            )
        if rows:
            OutboxEntry.objects.filter(id__in=[row.id for row in rows]).update(
                reserved_until=now + timedelta(seconds=outbox_settings.RESERVATION_SECONDS),
                reserved_by=token,
                publish_attempts=F("publish_attempts") + 1,
            )
    failpoint("relay.after_reserve")
    return rows


def _publish(rows: list[OutboxEntry]) -> tuple[list[int], dict[int, str], str]:
    """Step 2: publish over one connection, packed into batch messages where a rule allows
    (outbox.batching); returns (published ids, errors by id, the connection's error or "")."""
    done: list[int] = []
    errors: dict[int, str] = {}
    down = ""  # the connection's error, once a send failed on it: the rest is not sent
    with task_sender(celery_app()) as send:
        for message in messages_of(rows):
            if down:
                errors.update(dict.fromkeys(message.ids, down))
                continue
            try:
                with publish_traced(message.task_name, message.kwargs) as kwargs:
                    send(message.task_name, kwargs, message.queue, message.priority)
            except Exception as exc:  # back off these rows; the rest too if the broker is down
                error = f"{type(exc).__name__}: {exc}"[:500]
                errors.update(dict.fromkeys(message.ids, error))
                if isinstance(exc, BROKER_DOWN):
                    down = error
            else:
                done.extend(message.ids)
    return done, errors, down


def outbox_unpublished(ids: list[int]) -> QuerySet[OutboxEntry]:
    """The rows of `ids` not published yet, looked up by primary key: `num_nulls()` says "not
    published" without proving the due indexes' predicate, so no plan scans a due index whole
    to filter it by id (outbox migration 0006 says why that matters)."""
    nulls = Func(F("published_at"), function="num_nulls", output_field=IntegerField())
    return OutboxEntry.objects.filter(id__in=ids).alias(nulls=nulls).filter(nulls=1)


def outbox_mark_failed(errors: dict[int, str], attempts: dict[int, int]) -> None:
    """Step 4: release the reservation and push the row back with capped backoff; one
    UPDATE per (back-off, error): a broker outage fails a call's rows with one error."""
    now = timezone.now()
    groups: dict[tuple[float, str], list[int]] = defaultdict(list)
    for row_id, error in errors.items():
        delay = min(outbox_settings.PUBLISH_BACKOFF_CAP, 0.5 * 2 ** min(attempts[row_id], 10))
        groups[(delay, error)].append(row_id)
    for (delay, error), ids in groups.items():
        outbox_unpublished(ids).update(
            reserved_until=None, available_at=now + timedelta(seconds=delay), last_error=error
        )
    if errors:
        # One line per failed publish call, not per row: a broker outage under load fails
        # thousands of rows a second (each row keeps its own error in `last_error`).
        first_id, first_error = next(iter(errors.items()))
        logger.warning(
            "outbox publish failed for %d row(s): %s",
            len(errors),
            first_error,
            extra={"outbox_ids": list(errors)[:20], "outbox_id": first_id, "error": first_error},
        )


def _publish_and_mark(
    rows: list[OutboxEntry], mark: Callable[[list[int]], object] = outbox_mark_published
) -> RelayResult:
    down = ""
    try:
        done, errors, down = _publish(rows)
    except Exception as exc:  # no broker connection at all: every row backs off
        error = f"{type(exc).__name__}: {exc}"[:500]
        done, errors = [], dict.fromkeys((row.id for row in rows), error)
        down = error if isinstance(exc, BROKER_DOWN) else ""
    if down:
        breaker.failed(down)
    elif done:
        breaker.succeeded()
    failpoint("relay.after_publish_before_mark")
    mark(done)
    outbox_mark_failed(errors, {row.id: row.publish_attempts + 1 for row in rows})
    return RelayResult(
        reserved=len(rows), published=len(done), failed=len(errors), errors=list(errors.values())
    )


def outbox_relay_batch(*, limit: int | None = None) -> RelayResult:
    """Reserve, publish and mark one batch of due rows (see the module docstring)."""
    rows = outbox_reserve_due(limit=limit or outbox_settings.RELAY_BATCH_SIZE)
    if not rows:
        return RelayResult()
    return _publish_and_mark(rows)


def outbox_relay_until_empty(*, time_budget: float = 5.0) -> RelayResult:
    """Run batches until nothing is due or the time budget is spent."""
    total = RelayResult()
    started = time.monotonic()
    while time.monotonic() - started < time_budget:
        result = outbox_relay_batch()
        total.reserved += result.reserved
        total.published += result.published
        total.failed += result.failed
        total.errors.extend(result.errors[:5])
        if result.reserved == 0 or result.published == 0:
            break
    return total


def outbox_publish_after_commit(rows: list[OutboxEntry]) -> None:
    """Fast path: publish rows this process reserved and just committed, from memory; when
    other threads of the process are submitting or publishing, leave them with the process's
    publisher, which packs them (outbox.fastpath).

    Never raises: the transaction already committed, so the caller's answer stands; a row
    that fails here is published by the relay when its reservation lapses. Published rows
    are marked in batches by this process's mark thread (outbox/marks.py), not one by one.
    """
    failpoint("submit.after_commit_before_publish")
    publish_combined(rows, _publish_and_mark_later)


def _publish_and_mark_later(rows: list[OutboxEntry]) -> None:
    _publish_and_mark(rows, mark=marks.mark_later)
