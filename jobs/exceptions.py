"""Exceptions of the public contract (`jobs.exceptions`) and of the guarded writes."""

from __future__ import annotations


class JobError(Exception):
    """Base class of everything this package raises on purpose."""


class TransientError(JobError):
    """A failure worth retrying later (a dependency is down, a timeout)."""


class PermanentError(JobError):
    """A failure no retry can fix (malformed input, a revoked grant). Never retried."""

    category = "permanent"


class ValidationFailed(PermanentError):
    """Input does not match the kind's schema."""

    category = "validation"


class Forbidden(PermanentError):
    """The owner may no longer read the input or release the result."""

    category = "forbidden"


class LeaseLost(JobError):
    """A fenced write matched zero rows: another generation owns the job now."""


class InvalidTransition(JobError):
    """A guarded state change matched zero rows: the job is not in a source state."""


class IdempotencyConflict(JobError):
    """The same idempotency key was used with a different request."""


class UnknownKind(JobError):
    """No handler is registered for this kind (at submission time)."""


class InputTooLarge(JobError):
    """The input exceeds JOBS_MAX_INPUT_BYTES; send an object reference instead."""


class OutboxOutsideTransaction(JobError):
    """outbox_enqueue was called outside transaction.atomic: the dual-write bug."""
