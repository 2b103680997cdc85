"""Which broker connections the outbox's kept producer moves to outbox.kombu_redis: kombu's own
Redis transport over plain redis:// only."""

from __future__ import annotations

import pytest
from kombu import Connection

from outbox import kombu_redis


def test_a_plain_redis_url__gets_the_transport_that_keeps_its_client() -> None:
    original = Connection("redis://127.0.0.1:6379/3", transport_options={"visibility_timeout": 7})
    kept = kombu_redis.with_kept_client(original)
    assert kept.transport_cls is kombu_redis.Transport
    assert isinstance(kept.transport, kombu_redis.Transport)
    assert kept.transport.Channel is kombu_redis.Channel
    assert (kept.hostname, kept.port, kept.virtual_host) == ("127.0.0.1", 6379, "3")
    assert kept.transport_options == {"visibility_timeout": 7}


@pytest.mark.parametrize(
    "url",
    [
        "amqp://guest:guest@127.0.0.1:5672//",
        "rediss://127.0.0.1:6380/0?ssl_cert_reqs=required",
        "sentinel://127.0.0.1:26379/0",
        "memory://",
    ],
)
def test_any_other_broker__is_left_as_the_project_set_it(url: str) -> None:
    connection = Connection(url)
    assert kombu_redis.with_kept_client(connection) is connection
