"""kombu's Redis transport, with one redis-py client per channel instead of one per command,
and a channel that outlives its connection without killing the worker.

kombu's Redis channel makes a new `redis.Redis` for every publish (and every ack and unacked
write): `Channel.conn_or_acquire()` with no client calls `_create_client()`. With redis-py 8 a
client costs about 0.15 ms of CPU to build (it copies its table of response callbacks), a
quarter of a publish over a held producer, paid before the message leaves. A client holds no
connection of its own: every command borrows one from the channel's pool and gives it back
(redis-py's `Redis` is safe to share between threads), so one client per pool sends exactly
what a fresh one would. When the channel replaces its pool (after a disconnect), the kept
client goes with it.

A closed channel: kombu closes every channel of a connection in turn when the connection
drops, and stops at the first that fails (Redis is gone, so restoring its unacked messages
fails); Celery then releases the connection (`Connection.collect()` sets the transport's
`client` to None) and closes the channels left over later. Closing one of those restores its
unacked messages, which builds a client from `transport.client`: kombu's own channel raises
AttributeError there, which Celery's `ignore_errors` does not ignore, and the worker exits
("Unrecoverable error: ... 'hostname'", celery/kombu#970 and #582 are the same family). This
channel raises a connection error instead, which Celery ignores as it does any other: the
messages stay in Redis's unacked hash, where kombu's visibility timeout and the redelivery
check (jobs.redeliver) find them; the worker reconnects and goes on.

Used for the outbox's held producer and, set at worker start by
`outbox.transport.worker_transport`, by every Celery worker of the project, when the broker
URL is plain `redis://`; `rediss://`, Sentinel, any other transport and a `broker_transport`
the project set are left as they are.
tests/unit/test_kombu_redis.py checks the reuse and the pool change, tests/integration/
test_broker_channel_close.py the closed channel against a Redis killed under it; the wire
test (tests/integration/test_relay_sender.py) checks the message is the one `send_task` sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu import Connection
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

#: `broker_transport` for a Celery app whose workers should use this transport.
TRANSPORT_PATH = f"{__name__}:Transport"


class Channel(kombu_redis.Channel):
    _kept_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        kept = self._kept_client
        if kept is None or kept.connection_pool is not self.pool:
            kept = self._kept_client = self._create_client()  # type: ignore[attr-defined]
        yield kept

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError(
                "the broker connection was released before this channel closed; its unacked "
                "messages stay in Redis until visibility_timeout or the redelivery check"
            )
        return super()._connparams(asynchronous)  # type: ignore[misc]


class Transport(kombu_redis.Transport):
    Channel = Channel


def with_kept_client(connection: Connection) -> Connection:
    """`connection` over this transport when it is kombu's own Redis transport for a plain
    `redis://` URL; otherwise `connection` unchanged."""
    if connection.transport_cls != "redis":
        return connection
    if connection.get_transport_cls() is not kombu_redis.Transport:
        return connection
    return connection.clone(transport=Transport)
