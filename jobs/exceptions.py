"""Exceptions of the public contract (`jobs.exceptions`) and of the guarded writes."""

from __future__ import annotations

# Raised by the outbox (the lower layer); re-exported for callers of `jobs.submit`.
from outbox.exceptions import OutboxOutsideTransaction as OutboxOutsideTransaction


class JobError(Exception):
    """Base class of everything this package raises on purpose."""


class TransientError(JobError):
    """A failure worth retrying later (a dependency is down, a timeout)."""


class PermanentError(JobError):
    """A failure no retry can fix (malformed input, a revoked grant). Never retried."""

    category = "permanent"


class ValidationFailed(PermanentError):
    """Input does not match the kind's schema. `summary` says where and which rule without
    the input's values: what quarantine reasons and log lines show."""

    category = "validation"

    def __init__(self, message: str, *, summary: str = "") -> None:
        super().__init__(message)
        self.summary = summary


class Forbidden(PermanentError):
    """The owner may no longer read the input or release the result."""

    category = "forbidden"


class LeaseLost(JobError):
    """A fenced write matched zero rows: another generation owns the job now."""


class InvalidTransition(JobError):
    """A guarded state change matched zero rows: the job is not in a source state."""


class IdempotencyConflict(JobError):
    """The same idempotency key was used with a different request."""


class InvalidCallbackUrl(JobError, ValueError):
    """A `callback_url` the library will not call: a scheme, a host or an address it refuses,
    or a job whose tenant has no callback secret (JOBS_CALLBACK_SECRETS)."""


class UnknownKind(JobError):
    """No handler is registered for this kind (at submission time)."""


class InputTooLarge(JobError):
    """The input exceeds JOBS_MAX_INPUT_BYTES; send an object reference instead."""


class ScheduleCursorMoved(JobError):
    """A schedule's guarded cursor write matched zero rows: another ticker (or an operator)
    moved it; this ticker's decision, and the jobs it submitted, roll back."""


class ScheduleStateConflict(JobError):
    """Pausing a paused schedule, resuming a running one, or an operator action without a
    note."""


class InvalidDependency(PermanentError):
    """An `after=` that names no job the waiter's scope holds (unknown, another tenant's or
    owner's), or an `after_failure` that is no choice: nothing was written. From a handler's
    `ctx.submit`, a permanent failure."""

    category = "invalid_dependency"
