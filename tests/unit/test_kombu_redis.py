"""Which broker connections the outbox's kept producer and the project's workers move to
outbox.kombu_redis: kombu's own Redis transport over plain redis:// only."""

from __future__ import annotations

import pytest
from celery import Celery
from kombu import Connection

from outbox import kombu_redis
from outbox.kombu_redis import TRANSPORT_PATH
from outbox.transport import worker_transport


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


@pytest.mark.parametrize(
    ("url", "preset", "chosen"),
    [
        ("redis://127.0.0.1:6379/0", None, TRANSPORT_PATH),
        ("redis://127.0.0.1:6379/0", "redis", "redis"),  # the project's own choice stays
        ("amqp://guest:guest@127.0.0.1:5672//", None, None),
        ("rediss://127.0.0.1:6380/0?ssl_cert_reqs=required", None, None),
    ],
)
def test_workers_use_the_transport__over_plain_redis_unless_the_project_chose(
    url: str, preset: str | None, chosen: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    app = Celery("t", broker=url, set_as_current=False)
    app.conf.broker_transport = preset
    assert worker_transport(app) is (chosen == TRANSPORT_PATH)
    assert app.conf.broker_transport == chosen
    if chosen == TRANSPORT_PATH:
        assert isinstance(app.connection_for_read().transport, kombu_redis.Transport)
