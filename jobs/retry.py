"""Retry policy: classify a failure, then retry with capped full-jitter backoff or stop.

Pure: the clock (`now`) and the random source (`rng`) are passed in, so every decision is
reproducible in tests.
"""

from __future__ import annotations

import random
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from celery.exceptions import SoftTimeLimitExceeded
from django.db import DatabaseError, OperationalError
from django.db.utils import InterfaceError

from .exceptions import Forbidden, PermanentError, TransientError, ValidationFailed


class Category(StrEnum):
    TRANSIENT = "transient"  # a dependency failed; a later attempt can succeed
    PERMANENT = "permanent"  # input or grant is wrong; no attempt can succeed
    UNKNOWN = "unknown"  # an exception we did not classify; kind decides
    LEASE_EXPIRED = "lease_expired"  # the worker died or stalled past its lease


class Action(StrEnum):
    RETRY = "retry"
    QUARANTINE = "quarantine"


@dataclass(frozen=True)
class RetryPolicy:
    """Per-kind budget: whichever of attempts or elapsed time ends first stops retries."""

    max_attempts: int = 5
    max_elapsed: float = 3600.0
    base_delay: float = 1.0
    max_delay: float = 300.0
    retry_unknown: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.max_elapsed <= 0 or self.base_delay <= 0 or self.max_delay < self.base_delay:
            raise ValueError("need max_elapsed > 0 and 0 < base_delay <= max_delay")


@dataclass(frozen=True)
class Decision:
    action: Action
    category: Category
    reason: str
    delay: float = 0.0
    label: str = ""

    @property
    def error_category(self) -> str:
        """What the job shows clients: `forbidden` and `validation` are worth naming."""
        if self.category is Category.PERMANENT and self.label in {"forbidden", "validation"}:
            return self.label
        return self.category.value

    def as_details(self) -> dict[str, object]:
        return {
            "decision": self.action.value,
            "category": self.category.value,
            "reason": self.reason,
            "delay_seconds": round(self.delay, 3),
        }


_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    TransientError,
    TimeoutError,
    ConnectionError,
    socket.timeout,
    OperationalError,
    InterfaceError,
)


def _sqlstate(exc: BaseException) -> str | None:
    cause = exc.__cause__ or exc
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)


def classify(exc: BaseException) -> tuple[Category, str]:
    """Return the failure class and a short, payload-free label for it."""
    if isinstance(exc, Forbidden):
        return Category.PERMANENT, "forbidden"
    if isinstance(exc, ValidationFailed):
        return Category.PERMANENT, "validation"
    if isinstance(exc, PermanentError):
        return Category.PERMANENT, "permanent"
    if isinstance(exc, DatabaseError) and _sqlstate(exc) in {"40001", "40P01"}:
        return Category.TRANSIENT, "serialization_failure_or_deadlock"
    if isinstance(exc, _TRANSIENT_TYPES):
        return Category.TRANSIENT, type(exc).__name__
    if isinstance(exc, SoftTimeLimitExceeded):
        return Category.TRANSIENT, "soft_time_limit"
    module = type(exc).__module__
    if module.startswith("requests") and "Timeout" in type(exc).__name__:
        return Category.TRANSIENT, "timeout"
    if module.startswith("requests") and "Connection" in type(exc).__name__:
        return Category.TRANSIENT, "connection"
    return Category.UNKNOWN, type(exc).__name__


SUMMARY_CHARS = 300


def failure_summary(exc: BaseException) -> str:
    """What a quarantine reason and a log line may say about a failure, without input.

    The message of an error the handler raised on purpose (`PermanentError`,
    `TransientError` and their subclasses: written for operators, docs/handlers.md), the
    schema's rule for a validation failure, and nothing of any other exception, whose text
    may quote input (the job's error keeps it, for staff). Empty when there is nothing."""
    if isinstance(exc, ValidationFailed):
        text = exc.summary
    elif isinstance(exc, PermanentError | TransientError):
        text = str(exc)
    else:
        return ""
    return " ".join(text.split())[:SUMMARY_CHARS]


def backoff_delay(attempt: int, *, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    exponent = min(max(attempt - 1, 0), 62)
    ceiling = min(cap, base * (2.0**exponent))
    return rng.uniform(0.0, ceiling)


def backoff_ceiling(attempt: int, *, base: float, cap: float) -> float:
    return min(cap, base * (2.0 ** min(max(attempt - 1, 0), 62)))


def decide(
    *,
    category: Category,
    label: str,
    attempt: int,
    policy: RetryPolicy,
    deadline: datetime | None,
    now: datetime,
    rng: random.Random,
    summary: str = "",
) -> Decision:
    """Retry or quarantine, with the reason. `attempt` is the attempt that just failed;
    `summary` (failure_summary) is what the handler said, and the reason carries it."""
    said = f"{label}: {summary}" if summary else label
    if category is Category.PERMANENT:
        # "permanent failure: <message>"; a forbidden or invalid input says so first.
        named = summary if label == "permanent" or not summary else f"{label}: {summary}"
        reason = f"permanent failure: {named or label}"
        return Decision(Action.QUARANTINE, category, reason, label=label)
    if category is Category.UNKNOWN and not policy.retry_unknown:
        return Decision(Action.QUARANTINE, category, f"unclassified failure: {said}")
    if attempt >= policy.max_attempts:
        return Decision(
            Action.QUARANTINE, category, f"attempt budget exhausted after {attempt}: {said}"
        )
    delay = backoff_delay(attempt, base=policy.base_delay, cap=policy.max_delay, rng=rng)
    if deadline is not None and now + timedelta(seconds=delay) >= deadline:
        return Decision(Action.QUARANTINE, category, f"elapsed budget exhausted: {said}")
    return Decision(Action.RETRY, category, f"retry after {said}", delay)
