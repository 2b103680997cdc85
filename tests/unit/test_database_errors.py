"""Which database errors mean "unreachable" (pause consuming) and which are an answer about one
statement (requeue, keep consuming): jobs.gate.database_unreachable."""

from __future__ import annotations

import psycopg
import pytest
from django.db import InterfaceError, OperationalError, ProgrammingError

from jobs.gate import database_unreachable, sqlstate


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
