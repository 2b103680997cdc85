"""A worker reconnects to its broker within seconds of its return, however long it was gone.

Celery's consumer reconnects through kombu's `Connection.ensure_connection`, whose waits grow
by 2 s up to 30 s and are no setting of Celery's. After an outage of four minutes or more a
worker tried again only every 30 s, so the relay (a task of the maintenance worker) published
its first row up to 30 s after Redis was back: 32.4 s in the soak's 5-minute outage. Here the
wait is capped at `RECONNECT_MAX_SECONDS`; an attempt costs a refused connect, or a connect
timeout (`broker_connection_timeout`) when the broker is cut off.

Celery's worker exits once `broker_connection_max_retries` attempts failed (kombu's waits made
the default 100 last 46.5 minutes). The cap keeps that time, not the count: the worker gets as
many attempts as fit in it at the capped wait (1,395 for 100), so it reconnects sooner and
gives up no sooner (tests/integration/test_broker_reconnect.py). None or 0 (for ever) stays.
"""

from __future__ import annotations

from typing import Any

import kombu
from celery import Celery

RECONNECT_MAX_SECONDS = 2


class Connection(kombu.Connection):
    """kombu's Connection, its reconnection waits capped (Celery builds every broker
    connection of the app from `app.amqp.Connection`)."""

    def _ensure_connection(
        self,
        errback: Any = None,
        max_retries: int | None = None,
        interval_start: int = 2,
        interval_step: int = 2,
        interval_max: int = 30,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        cap = RECONNECT_MAX_SECONDS
        return super()._ensure_connection(
            errback,
            max_retries,
            min(interval_start, cap),
            min(interval_step, cap),
            min(interval_max, cap),
            *args,
            **kwargs,
        )


def kombu_wait_total(attempts: int) -> int:
    """Seconds kombu's own waits (2 s, growing by 2 s to 30 s) add up to over `attempts`."""
    return sum(min(2 * n, 30) for n in range(1, attempts + 1))


def worker_reconnects_promptly(app: Celery) -> None:
    """worker_init: the worker's connections (its consumer's among them) are of this class,
    with as many attempts as fit in the time kombu's waits gave the project's number."""
    if issubclass(app.amqp.Connection, Connection):
        return
    app.amqp.Connection = Connection
    attempts = app.conf.broker_connection_max_retries
    if attempts:
        app.conf.broker_connection_max_retries = -(
            -kombu_wait_total(attempts) // RECONNECT_MAX_SECONDS
        )
