"""DATABASE_URL: libpq's multi-host form (a failover pair) is read as libpq reads it."""

from __future__ import annotations

import dj_database_url
import pytest

from jobsite.runenv import without_password
from jobsite.settings import database_from_url

PAIR = (
    "postgres://jobs:s%40cret@db1.internal:5432,db2.internal:6432/durable_jobs"
    "?target_session_attrs=read-write&connect_timeout=2"
)


def test_database_from_url__multi_host_url_gives_libpq_host_and_port_lists() -> None:
    config = database_from_url(PAIR, conn_max_age=0)
    assert config["HOST"] == "db1.internal,db2.internal"
    assert config["PORT"] == "5432,6432"
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == (
        "durable_jobs",
        "jobs",
        "s@cret",
    )
    assert config["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": 2}


def test_database_from_url__single_host_url__as_dj_database_url_reads_it() -> None:
    url = "postgres://postgres@127.0.0.1:5433/durable_jobs?connect_timeout=2"
    assert database_from_url(url, conn_max_age=5) == dj_database_url.parse(url, conn_max_age=5)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgres://u:secret@127.0.0.1:5432/db", "postgres://u:***@127.0.0.1:5432/db"),
        (
            "postgres://u:secret@h1:5432,h2:5433/db?target_session_attrs=read-write",
            "postgres://u:***@h1:5432,h2:5433/db?target_session_attrs=read-write",
        ),
        ("postgres://u@h1/db", "postgres://u@h1/db"),
    ],
)
def test_error_messages_hide_the_password__single_and_multi_host_urls(url: str, shown: str) -> None:
    assert without_password(url) == shown
