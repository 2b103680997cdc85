"""One name per worker: lease owners, /ops/ sightings and log lines (jobs.ops.workers)."""

from __future__ import annotations

import os
import socket
from typing import Any

from jobs.identity import lease_owner_token, lease_owner_worker, worker_identity


def test_worker_is_named_by_celery_node__node_given(settings: Any) -> None:
    settings.JOBS_WORKER_NAME = ""
    assert worker_identity("celery@vm") == "celery@vm"


def test_worker_is_named_by_the_host__outside_a_celery_task(settings: Any) -> None:
    settings.JOBS_WORKER_NAME = ""
    assert worker_identity() == socket.gethostname()


def test_jobs_worker_name_wins__set(settings: Any) -> None:
    settings.JOBS_WORKER_NAME = "blue-7"
    assert worker_identity("celery@vm") == "blue-7"
    assert lease_owner_token().startswith("blue-7:")


def test_lease_owner_token_is_name_nonce_pid__fresh_per_claim(settings: Any) -> None:
    settings.JOBS_WORKER_NAME = "celery@vm"
    first, second = lease_owner_token(), lease_owner_token()

    assert first != second
    assert lease_owner_worker(first) == ("celery@vm", os.getpid())
    name, nonce, pid = first.rsplit(":", 2)
    assert (name, len(nonce), int(pid)) == ("celery@vm", 6, os.getpid())


def test_lease_owner_worker_keeps_other_owners_whole__no_pid() -> None:
    assert lease_owner_worker("ghost:1") == ("ghost:1", None)
    assert lease_owner_worker(None) == ("", None)
    assert lease_owner_worker("w:y:1") == ("w", 1)
