"""Exceptions the outbox raises on purpose."""

from __future__ import annotations


class OutboxError(Exception):
    """Base class of everything this package raises on purpose."""


class OutboxOutsideTransaction(OutboxError):
    """outbox_enqueue was called outside transaction.atomic: the dual-write bug."""


class BrokerNotConfigured(OutboxError):
    """The Celery app has no broker URL: publishing would go to Celery's default broker."""
