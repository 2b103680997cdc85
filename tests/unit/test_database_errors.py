"""Which database errors mean "unreachable" (pause consuming) and which are an answer about one
statement (requeue, keep consuming): jobs.gate.database_unreachable."""

from __future__ import annotations

import psycopg
import pytest
from django.db import InterfaceError, OperationalError, ProgrammingError, transaction

from jobs.gate import (
    REFUSED_PAUSE,
    REFUSED_TRIES,
    database_failed,
    database_unreachable,
    retried_when_refused,
    sqlstate,
)


def _wrapped(driver_error: Exception) -> OperationalError:
    """As Django raises it: its own class, the driver's error as the cause."""
    error = OperationalError(str(driver_error))
    error.__cause__ = driver_error
    return error


@pytest.mark.parametrize(
    ("driver_error", "unreachable"),
    [
        (psycopg.OperationalError("connection refused"), True),  # no SQLSTATE: client side
        (psycopg.errors.ConnectionFailure("connection failure"), True),  # class 08
        (psycopg.errors.AdminShutdown("terminating connection"), True),  # 57P01
        (psycopg.errors.CannotConnectNow("starting up"), True),  # 57P03
        (psycopg.errors.TooManyConnections("too many clients"), True),  # 53300
        (psycopg.errors.LockNotAvailable("lock timeout"), False),  # 55P03
        (psycopg.errors.QueryCanceled("statement timeout"), False),  # 57014
        (psycopg.errors.DeadlockDetected("deadlock"), False),  # 40P01
    ],
    ids=[
        "refused",
        "connection-failure",
        "admin-shutdown",
        "cannot-connect-now",
        "too-many-connections",
        "lock-not-available",
        "query-canceled",
        "deadlock",
    ],
)
def test_unreachable_by_sqlstate(driver_error: Exception, unreachable: bool) -> None:
    assert database_unreachable(_wrapped(driver_error)) is unreachable


def test_interface_error_is_unreachable_and_other_errors_are_not() -> None:
    assert database_unreachable(InterfaceError("connection already closed"))
    assert not database_unreachable(ProgrammingError("syntax error"))
    assert not database_unreachable(ValueError("not a database error"))


def test_sqlstate_of_a_django_error_is_its_causes() -> None:
    assert sqlstate(_wrapped(psycopg.errors.LockNotAvailable("x"))) == "55P03"
    assert sqlstate(OperationalError("no cause")) is None


def test_a_real_refused_connection_is_unreachable() -> None:
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect("postgresql://postgres@127.0.0.1:1/x", connect_timeout=2)
    assert database_unreachable(_wrapped(caught.value))


class _Write:
    """A write that is refused with `errors` in turn, then answers "done"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise _wrapped(self.errors.pop(0))
        return "done"


@pytest.fixture
def no_pause(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """jobs.gate's pauses between tries, recorded instead of slept."""
    pauses: list[float] = []
    monkeypatch.setattr("jobs.gate.time.sleep", pauses.append)
    return pauses


@pytest.mark.parametrize(
    "refusal",
    [
        psycopg.errors.LockNotAvailable("lock timeout"),
        psycopg.errors.DeadlockDetected("deadlock"),
        psycopg.errors.SerializationFailure("could not serialize"),
    ],
    ids=["lock-not-available", "deadlock", "serialization-failure"],
)
def test_a_write_refused_for_a_lock__runs_again_after_a_pause(
    refusal: Exception, no_pause: list[float]
) -> None:
    write = _Write(refusal, refusal)
    assert retried_when_refused(write, what="the completion") == "done"
    assert write.calls == 3
    low, high = REFUSED_PAUSE
    assert len(no_pause) == 2
    assert low <= no_pause[0] <= high and 2 * low <= no_pause[1] <= 2 * high


def test_refused_every_time__the_last_refusal_escapes(no_pause: list[float]) -> None:
    write = _Write(*(psycopg.errors.LockNotAvailable("lock timeout"),) * REFUSED_TRIES)
    with pytest.raises(OperationalError) as caught:
        retried_when_refused(write, what="the completion")
    assert sqlstate(caught.value) == "55P03"
    assert write.calls == REFUSED_TRIES


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.QueryCanceled("statement timeout"),  # an answer, not about a lock
        psycopg.OperationalError("connection refused"),  # unreachable: the gate's, not ours
        psycopg.errors.AdminShutdown("terminating connection"),
    ],
    ids=["query-canceled", "refused-connection", "admin-shutdown"],
)
def test_other_database_errors__escape_at_once(error: Exception, no_pause: list[float]) -> None:
    write = _Write(error)
    with pytest.raises(OperationalError):
        retried_when_refused(write, what="the completion")
    assert write.calls == 1 and no_pause == []


@pytest.mark.django_db
def test_inside_a_callers_transaction__nothing_is_retried(no_pause: list[float]) -> None:
    """The caller's transaction is aborted by the refusal: only its owner can run it again."""
    write = _Write(psycopg.errors.LockNotAvailable("lock timeout"))
    with pytest.raises(OperationalError), transaction.atomic():
        retried_when_refused(write, what="the completion")
    assert write.calls == 1 and no_pause == []


@pytest.mark.parametrize(
    ("driver_error", "failed"),
    [
        (psycopg.errors.LockNotAvailable("lock timeout"), True),
        (psycopg.OperationalError("connection refused"), True),
        (psycopg.errors.QueryCanceled("statement timeout"), False),
        (psycopg.errors.UniqueViolation("duplicate key"), False),
    ],
    ids=["lock", "unreachable", "query-canceled", "unique-violation"],
)
def test_database_failed__is_the_deliverys_not_the_jobs(
    driver_error: Exception, failed: bool
) -> None:
    assert database_failed(_wrapped(driver_error)) is failed
