"""jobs.retry is pure: backoff properties (hypothesis), the classification table, decide()."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import psycopg.errors
import pytest
import requests
from django.db import DatabaseError, IntegrityError, OperationalError
from django.db.utils import InterfaceError
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.exceptions import Forbidden, PermanentError, TransientError, ValidationFailed
from jobs.retry import (
    Action,
    Category,
    Decision,
    RetryPolicy,
    backoff_ceiling,
    backoff_delay,
    classify,
    decide,
)

# Pure functions, but a busy 2-core CI box must not turn a GC pause into a failure.
relaxed = settings(deadline=None, max_examples=200)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

attempts = st.integers(min_value=1, max_value=200)
bases = st.floats(min_value=0.001, max_value=60.0, allow_nan=False, allow_infinity=False)
caps = st.floats(min_value=0.001, max_value=86_400.0, allow_nan=False, allow_infinity=False)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


class FixedDraw(random.Random):
    """An rng whose uniform(a, b) always lands at the same fraction `u` of the interval."""

    def __init__(self, u: float) -> None:
        super().__init__(0)
        self.u = u

    def uniform(self, a: float, b: float) -> float:
        return a + self.u * (b - a)


# -- backoff: properties --------------------------------------------------------------------


@relaxed
@given(attempt=attempts, base=bases, cap=caps, seed=st.integers())
def test_backoff_delay_within_full_jitter_bounds__any_attempt(
    attempt: int, base: float, cap: float, seed: int
) -> None:
    delay = backoff_delay(attempt, base=base, cap=cap, rng=random.Random(seed))
    assert 0.0 <= delay <= min(cap, base * 2.0 ** (attempt - 1))


@relaxed
@given(attempt=attempts, base=bases, cap=caps, seed=st.integers())
def test_backoff_delay_never_exceeds_cap__huge_attempts(
    attempt: int, base: float, cap: float, seed: int
) -> None:
    delay = backoff_delay(attempt * 1000, base=base, cap=cap, rng=random.Random(seed))
    assert delay <= cap
    assert backoff_ceiling(attempt * 1000, base=base, cap=cap) <= cap


@relaxed
@given(attempt=attempts, base=bases, cap=caps)
def test_backoff_ceiling_is_capped_exponential__formula(
    attempt: int, base: float, cap: float
) -> None:
    assert backoff_ceiling(attempt, base=base, cap=cap) == pytest.approx(
        min(cap, base * 2.0 ** min(attempt - 1, 62))
    )


@relaxed
@given(attempt=attempts, base=bases, cap=caps)
def test_expected_delay_monotone_non_decreasing__until_cap(
    attempt: int, base: float, cap: float
) -> None:
    # The mean of uniform(0, ceiling) is ceiling / 2.
    here = backoff_ceiling(attempt, base=base, cap=cap) / 2
    after = backoff_ceiling(attempt + 1, base=base, cap=cap) / 2
    assert after >= here
    assert after <= cap / 2
    if base * 2.0 ** (attempt - 1) >= cap:  # at the cap the expectation stays put
        assert after == here == pytest.approx(cap / 2)


@relaxed
@given(attempt=attempts, base=bases, cap=caps, u=unit)
def test_delay_monotone_for_every_random_draw__coupled(
    attempt: int, base: float, cap: float, u: float
) -> None:
    # Same draw u at attempt and attempt+1: monotone per draw implies monotone expectation.
    first = backoff_delay(attempt, base=base, cap=cap, rng=FixedDraw(u))
    second = backoff_delay(attempt + 1, base=base, cap=cap, rng=FixedDraw(u))
    assert second >= first


@relaxed
@given(attempt=attempts, base=bases, cap=caps, seed=st.integers())
def test_backoff_delay_reproducible__same_seed(
    attempt: int, base: float, cap: float, seed: int
) -> None:
    one = backoff_delay(attempt, base=base, cap=cap, rng=random.Random(seed))
    two = backoff_delay(attempt, base=base, cap=cap, rng=random.Random(seed))
    assert one == two


def test_sample_mean_tracks_half_ceiling__seeded_rng() -> None:
    rng = random.Random(1234)
    means = []
    for attempt in range(1, 9):
        samples = [backoff_delay(attempt, base=0.5, cap=20.0, rng=rng) for _ in range(4000)]
        mean = sum(samples) / len(samples)
        assert mean == pytest.approx(backoff_ceiling(attempt, base=0.5, cap=20.0) / 2, rel=0.06)
        means.append(mean)
    # Strictly growing below the cap (0.5 * 2**6 = 32 > 20 from attempt 7 on).
    assert means[:6] == sorted(means[:6])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_elapsed": 0}, "max_elapsed"),
        ({"base_delay": 0}, "base_delay"),
        ({"base_delay": 10, "max_delay": 1}, "base_delay"),
    ],
)
def test_retry_policy_rejects_nonsense__invalid_budget(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


# -- classification table -------------------------------------------------------------------


def _db_error_from(cause: BaseException, wrapper: type[DatabaseError]) -> DatabaseError:
    error = wrapper(str(cause))
    error.__cause__ = cause
    return error


CLASSIFICATION = [
    (TransientError("dependency down"), Category.TRANSIENT),
    (TimeoutError("slow"), Category.TRANSIENT),
    (BrokenPipeError("pipe"), Category.TRANSIENT),
    (ConnectionError("reset"), Category.TRANSIENT),
    (ConnectionRefusedError("refused"), Category.TRANSIENT),
    (OperationalError("server closed the connection"), Category.TRANSIENT),
    (InterfaceError("connection already closed"), Category.TRANSIENT),
    (
        _db_error_from(psycopg.errors.SerializationFailure("40001"), DatabaseError),
        Category.TRANSIENT,
    ),
    (_db_error_from(psycopg.errors.DeadlockDetected("40P01"), DatabaseError), Category.TRANSIENT),
    (requests.Timeout("read timed out"), Category.TRANSIENT),
    (requests.ConnectTimeout("connect timed out"), Category.TRANSIENT),
    (requests.ConnectionError("unreachable"), Category.TRANSIENT),
    (PermanentError("bad input"), Category.PERMANENT),
    (ValidationFailed("schema"), Category.PERMANENT),
    (Forbidden("grant revoked"), Category.PERMANENT),
    (_db_error_from(psycopg.errors.UniqueViolation("23505"), IntegrityError), Category.UNKNOWN),
    (ValueError("who knows"), Category.UNKNOWN),
    (KeyError("missing"), Category.UNKNOWN),
]


@pytest.mark.parametrize(
    ("exc", "category"), CLASSIFICATION, ids=[type(e).__name__ for e, _ in CLASSIFICATION]
)
def test_classify_maps_failure_to_category__table(exc: BaseException, category: Category) -> None:
    found, label = classify(exc)
    assert found is category
    assert label  # a short, payload-free label
    assert "bad input" not in label and "grant revoked" not in label


def test_classify_labels_permanent_subtypes__forbidden_and_validation() -> None:
    assert classify(Forbidden("x")) == (Category.PERMANENT, "forbidden")
    assert classify(ValidationFailed("x")) == (Category.PERMANENT, "validation")
    assert classify(PermanentError("x")) == (Category.PERMANENT, "permanent")


# -- decide(): budgets under an injected clock and rng ---------------------------------------

POLICY = RetryPolicy(max_attempts=4, max_elapsed=60, base_delay=1.0, max_delay=8.0)


def _decide(
    category: Category = Category.TRANSIENT,
    *,
    attempt: int = 1,
    policy: RetryPolicy = POLICY,
    deadline: datetime | None = NOW + timedelta(seconds=60),
    now: datetime = NOW,
    rng: random.Random | None = None,
) -> Decision:
    return decide(
        category=category,
        label="TransientError",
        attempt=attempt,
        policy=policy,
        deadline=deadline,
        now=now,
        rng=rng or random.Random(7),
    )


def test_decide_retries_with_jittered_delay__transient_within_budget() -> None:
    decision = _decide(attempt=2)
    assert decision.action is Action.RETRY
    assert 0.0 <= decision.delay <= 2.0
    assert decision.as_details()["decision"] == "retry"


def test_decide_is_reproducible__same_clock_and_seed() -> None:
    assert _decide(attempt=3, rng=random.Random(99)) == _decide(attempt=3, rng=random.Random(99))


def test_decide_delay_is_rng_fraction_of_ceiling__fixed_draw() -> None:
    decision = _decide(attempt=3, rng=FixedDraw(0.5))
    assert decision.delay == pytest.approx(2.0)


def test_decide_quarantines__permanent_on_first_attempt() -> None:
    decision = _decide(Category.PERMANENT, attempt=1)
    assert decision.action is Action.QUARANTINE
    assert decision.reason.startswith("permanent failure")
    assert decision.delay == 0.0


def test_decide_retries_unknown__default_policy() -> None:
    assert _decide(Category.UNKNOWN).action is Action.RETRY


def test_decide_quarantines_unknown__kind_opts_out() -> None:
    policy = RetryPolicy(max_attempts=4, retry_unknown=False)
    decision = _decide(Category.UNKNOWN, policy=policy)
    assert decision.action is Action.QUARANTINE
    assert "unclassified" in decision.reason


@pytest.mark.parametrize("category", [Category.TRANSIENT, Category.UNKNOWN, Category.LEASE_EXPIRED])
def test_decide_quarantines__attempt_budget_spent(category: Category) -> None:
    assert _decide(category, attempt=3).action is Action.RETRY
    decision = _decide(category, attempt=4)
    assert decision.action is Action.QUARANTINE
    assert "attempt budget exhausted after 4" in decision.reason


def test_decide_quarantines__elapsed_budget_ends_before_attempts() -> None:
    # Attempt 1 of 50 but the clock says the deadline is 0.3s away and the draw is 0.9s.
    policy = RetryPolicy(max_attempts=50, max_elapsed=3, base_delay=1.0, max_delay=1.0)
    decision = _decide(
        attempt=1,
        policy=policy,
        deadline=NOW + timedelta(seconds=0.3),
        now=NOW,
        rng=FixedDraw(0.9),
    )
    assert decision.action is Action.QUARANTINE
    assert decision.reason.startswith("elapsed budget exhausted")


def test_decide_retries__delay_lands_before_deadline() -> None:
    policy = RetryPolicy(max_attempts=50, max_elapsed=3, base_delay=1.0, max_delay=1.0)
    decision = _decide(
        attempt=1, policy=policy, deadline=NOW + timedelta(seconds=0.3), rng=FixedDraw(0.1)
    )
    assert decision.action is Action.RETRY


def test_decide_quarantines__clock_already_past_deadline() -> None:
    decision = _decide(attempt=1, deadline=NOW - timedelta(seconds=1), rng=FixedDraw(0.0))
    assert decision.action is Action.QUARANTINE


def test_decide_ignores_elapsed_budget__no_deadline() -> None:
    decision = _decide(attempt=1, deadline=None, now=NOW + timedelta(days=365))
    assert decision.action is Action.RETRY


@relaxed
@given(
    attempt=st.integers(min_value=1, max_value=100),
    max_attempts=st.integers(min_value=1, max_value=100),
    remaining=st.floats(min_value=-10, max_value=100, allow_nan=False),
    u=unit,
)
def test_decide_never_schedules_past_either_budget__any_inputs(
    attempt: int, max_attempts: int, remaining: float, u: float
) -> None:
    policy = RetryPolicy(max_attempts=max_attempts, max_elapsed=100, base_delay=0.5, max_delay=30)
    deadline = NOW + timedelta(seconds=remaining)
    decision = decide(
        category=Category.TRANSIENT,
        label="t",
        attempt=attempt,
        policy=policy,
        deadline=deadline,
        now=NOW,
        rng=FixedDraw(u),
    )
    if decision.action is Action.RETRY:
        assert attempt < max_attempts
        assert NOW + timedelta(seconds=decision.delay) < deadline
        assert 0 <= decision.delay <= backoff_ceiling(attempt, base=0.5, cap=30)
    else:
        assert (
            attempt >= max_attempts
            or NOW + timedelta(seconds=decision.delay) >= deadline
            or ("elapsed" in decision.reason)
        )
