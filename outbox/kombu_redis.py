"""kombu's Redis transport, with one redis-py client per channel instead of one per command.

kombu's Redis channel makes a new `redis.Redis` for every publish (and every ack and unacked
write): `Channel.conn_or_acquire()` with no client calls `_create_client()`. With redis-py 8 a
client costs about 0.15 ms of CPU to build (it copies its table of response callbacks), a
quarter of a publish over a held producer, paid before the message leaves. A client holds no
connection of its own: every command borrows one from the channel's pool and gives it back
(redis-py's `Redis` is safe to share between threads), so one client per pool sends exactly
what a fresh one would. When the channel replaces its pool (after a disconnect), the kept
client goes with it.

Used for the outbox's held producer (`outbox.transport`) when the broker URL is plain
`redis://`; `rediss://`, Sentinel and any other transport are left as the project set them.
tests/unit/test_kombu_redis.py checks the reuse and the pool change; the wire test
(tests/integration/test_relay_sender.py) checks the message is the one `send_task` sends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu import Connection
from kombu.transport import redis as kombu_redis


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
