"""Quarantine reasons carry what the handler said, and never the job's input (jobs.retry)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from jobs.exceptions import Forbidden, PermanentError, TransientError, ValidationFailed
from jobs.retry import RetryPolicy, classify, decide, failure_summary

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def reason_for(error: BaseException, *, attempt: int = 1, max_attempts: int = 3) -> str:
    category, label = classify(error)
    return decide(
        category=category,
        label=label,
        attempt=attempt,
        policy=RetryPolicy(max_attempts=max_attempts),
        deadline=NOW + timedelta(hours=1),
        now=NOW,
        rng=random.Random(1),
        summary=failure_summary(error),
    ).reason


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            PermanentError("the upstream archive has no such document"),
            "permanent failure: the upstream archive has no such document",
        ),
        (Forbidden("document not found"), "permanent failure: forbidden: document not found"),
        (
            ValidationFailed(
                "input does not match k: title: 'private-1' is not of type 'integer'",
                summary='input does not match k: title: type "integer"',
            ),
            'permanent failure: validation: input does not match k: title: type "integer"',
        ),
        (PermanentError(""), "permanent failure: permanent"),
    ],
)
def test_reason_carries_the_handlers_message__permanent_errors(
    error: BaseException, reason: str
) -> None:
    assert reason_for(error) == reason


def test_reason_keeps_the_last_transient_message__attempt_budget_spent() -> None:
    reason = reason_for(TransientError("provider returned 503"), attempt=3)

    assert reason == "attempt budget exhausted after 3: TransientError: provider returned 503"


def test_reason_names_only_the_class__any_other_exception() -> None:
    # Its text may quote input: a KeyError names the key, a ValueError the value.
    reason = reason_for(ValueError("invalid literal for int(): 'private-2'"), attempt=3)

    assert reason == "attempt budget exhausted after 3: ValueError"


def test_summary_is_one_short_line__long_multiline_message() -> None:
    summary = failure_summary(PermanentError("first line\n" + "x" * 1000))

    assert "\n" not in summary and summary.startswith("first line x")
    assert len(summary) == 300
