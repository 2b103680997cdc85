"""outbox.reconnect on kombu's own retry loop: a refused broker is tried again after at most
RECONNECT_MAX_SECONDS, and a worker's app builds its connections from that class."""

from __future__ import annotations

import socket

import pytest
from celery import Celery
from kombu.exceptions import OperationalError

from outbox import reconnect
from outbox.reconnect import Connection, kombu_wait_total, worker_reconnects_promptly


def _refused_url() -> str:
    with socket.socket() as s:  # a port nobody listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


def test_the_waits_between_attempts_stay_under_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reconnect, "RECONNECT_MAX_SECONDS", 1)
    waits: list[float] = []
    connection = Connection(_refused_url(), transport_options={"socket_connect_timeout": 1})
    with pytest.raises(OperationalError):
        connection.ensure_connection(
            errback=lambda exc, interval: waits.append(interval),
            max_retries=3,
            interval_start=2,
            interval_step=2,
            interval_max=30,  # Celery's consumer: kombu's defaults
        )
    assert waits == [1, 1, 1]


def test_a_worker_app_builds_its_broker_connections_from_the_capped_class() -> None:
    app = Celery("reconnect", broker=_refused_url())
    assert not isinstance(app.connection_for_read(), Connection)
    worker_reconnects_promptly(app)
    worker_reconnects_promptly(app)  # idempotent
    assert isinstance(app.connection_for_read(), Connection)
    assert isinstance(app.connection_for_write().clone(), Connection)


@pytest.mark.parametrize(
    ("attempts", "seconds", "capped"),
    [(100, 2790, 1395), (4, 20, 10), (1, 2, 1), (None, None, None), (0, None, 0)],
)
def test_the_worker_gives_up_no_sooner_than_with_kombus_waits(
    attempts: int | None, seconds: int | None, capped: int | None
) -> None:
    """Celery's worker exits when its attempts are used up; None or 0 retry for ever."""
    app = Celery("reconnect", broker=_refused_url())
    app.conf.broker_connection_max_retries = attempts
    if seconds is not None and attempts is not None:
        assert kombu_wait_total(attempts) == seconds
    worker_reconnects_promptly(app)
    assert app.conf.broker_connection_max_retries == capped
