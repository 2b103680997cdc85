"""What one delivery of a job came to (jobs.runtime, jobs.batch; a kind's on_outcome hook)."""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    QUARANTINED = "quarantined"
    CANCELLED = "cancelled"
    DUPLICATE = "duplicate"  # finished already, or a live lease elsewhere
    DEFERRED = "deferred"  # not its turn (serialization key, concurrency cap, not due)
    MISSING = "missing"
    INCOMPATIBLE = "incompatible"
    STALE = "stale"  # our lease was taken over; our writes were rejected
