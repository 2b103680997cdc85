"""The outbox's cross-process counters, kept in its own table (`outbox_counter`) so every
process agrees. The database function that does the counted work adds to them in the same
statement (`outbox_mark_published` calls `outbox_counter_add`); /metrics reads them."""

from __future__ import annotations

from .models import Counter

RELAY_PUBLISHED = "relay_published_total"  # rows marked published (relay and fast path)


def counter_value(name: str) -> int:
    """The counter's value; 0 before anything was counted."""
    value = Counter.objects.filter(name=name).values_list("value", flat=True).first()
    return value or 0
