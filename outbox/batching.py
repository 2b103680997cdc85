"""Several outbox rows in one broker message: the relay's batching rules.

A publish is one broker round trip per message, and a worker pays a claim, a commit and an
ack per message. Under backlog the relay therefore packs rows of the same task and queue
into one message of a batch task, when an app registered a rule for that task
(`batch_rule_add`): `jobs` registers `jobs.execute` -> `jobs.execute_many`, whose worker
claims and commits the whole message at once. The batch message's kwargs are
`{"items": [kwargs of each row, ...]}`; each row keeps its own id and is marked published
on its own, as before.

Packing happens only with company: the rows one publish call has in hand (a relay sweep's
reservation, a `submit_many`'s commit). A row alone goes out alone, as its own task, so an
idle system pays no latency for batching. Rows are spread evenly: 45 rows with
OUTBOX_BATCH_MAX=20 make three messages of 15, so several workers share a small backlog.

Priorities: rows of different bands (`band`: below, at or above the default 0) never share a
message, so a high row does not wait behind low ones packed with it; the messages of one
call go out highest priority first.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .conf import outbox_settings

if TYPE_CHECKING:
    from .models import OutboxEntry

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchRule:
    task_name: str
    batch_task: str
    # May a row with these kwargs share a message? (e.g. not for a long-running kind)
    accepts: Callable[[dict[str, Any]], bool]


@dataclass
class Message:
    """One broker message: the rows it carries are marked published together."""

    task_name: str
    queue: str
    kwargs: dict[str, Any]
    ids: list[int] = field(default_factory=list)
    priority: int = 0  # the highest of its rows'


_rules: dict[str, BatchRule] = {}


def batch_rule_add(
    task_name: str,
    *,
    batch_task: str,
    accepts: Callable[[dict[str, Any]], bool] = lambda kwargs: True,
) -> None:
    """Let the relay pack rows of `task_name` into messages of `batch_task`."""
    _rules[task_name] = BatchRule(task_name, batch_task, accepts)


def batch_rule(task_name: str) -> BatchRule | None:
    return _rules.get(task_name)


def _chunks(rows: list[OutboxEntry], most: int) -> Iterable[list[OutboxEntry]]:
    """`rows` in ceil(n / most) chunks of near-equal size, in order."""
    count = math.ceil(len(rows) / most)
    size, extra = divmod(len(rows), count)
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        yield rows[start:end]
        start = end


def band(priority: int) -> int:
    """The packing band of a priority: -1 below the default 0, 0 at it, 1 above."""
    return (priority > 0) - (priority < 0)


# A band's message priority, by the broker's meaning of the number. kombu's Redis transport
# keeps one list per priority step (0, 3, 6, 9) and its consumers pop the lists in that
# order: 0 first. A message that names none (a previous release's, another task's) goes to
# the list of 0, with the highest band. AMQP queues declared with x-max-priority deliver the
# highest number first; one that names none counts as 0, below every band.
_BROKER_PRIORITY = {
    "redis": {1: 0, 0: 3, -1: 6},
    "amqp": {1: 8, 0: 5, -1: 2},
}


def broker_priority(priority: int, driver_type: str) -> int | None:
    """The message priority a row of `priority` is published with over a transport of
    `driver_type` (kombu's: "redis", "amqp"), or None: send it without one (a transport
    without priorities, or OUTBOX_BROKER_PRIORITIES off)."""
    if not outbox_settings.BROKER_PRIORITIES:
        return None
    steps = _BROKER_PRIORITY.get(driver_type)
    return None if steps is None else steps[band(priority)]


def _accepts(rule: BatchRule, row: OutboxEntry) -> bool:
    """A rule that fails on a row (odd kwargs) sends that row alone, never fails the sweep."""
    try:
        return bool(rule.accepts(row.kwargs))
    except Exception:
        logger.exception("batch rule failed on a row; it goes alone", extra={"outbox_id": row.id})
        return False


def messages_of(rows: list[OutboxEntry]) -> list[Message]:
    """The broker messages that carry `rows`: packed where a rule allows (rows of one task,
    queue and `band`), else one each; highest priority first, else in the rows' order."""
    most = outbox_settings.BATCH_MAX
    messages: list[Message] = []
    packable: dict[tuple[str, str, int], list[OutboxEntry]] = {}
    for row in rows:
        rule = _rules.get(row.task_name)
        if most > 1 and rule is not None and _accepts(rule, row):
            packable.setdefault((row.task_name, row.queue, band(row.priority)), []).append(row)
        else:
            messages.append(Message(row.task_name, row.queue, row.kwargs, [row.id], row.priority))
    for (task_name, queue, _), group in packable.items():
        batch_task = _rules[task_name].batch_task
        for chunk in _chunks(group, most):
            top = max(row.priority for row in chunk)
            if len(chunk) == 1:
                messages.append(Message(task_name, queue, chunk[0].kwargs, [chunk[0].id], top))
            else:
                items = [row.kwargs for row in chunk]
                ids = [r.id for r in chunk]
                messages.append(Message(batch_task, queue, {"items": items}, ids, top))
    messages.sort(key=lambda message: -message.priority)  # stable: ties keep their order
    return messages
