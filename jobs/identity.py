"""Worker identity: one name for a worker in leases, /ops/, Flower and logs.

A worker's name is JOBS_WORKER_NAME when set, else Celery's node name (`celery@host`, or
whatever `--hostname` says: what Flower and `celery inspect` show), else the host name (a
process that is no Celery worker). A lease owner is that name, a random nonce and the pool
process's pid: `celery@host:5f0c2e:4242`. The nonce makes each claim's token unique (the
fence compares it), the pid tells two pool children of one worker apart, and it stays last
so scripts can split it off.
"""

from __future__ import annotations

import os
import secrets
import socket

from celery import current_task

from .conf import jobs_settings


def worker_identity(node: str | None = None) -> str:
    """This worker's name (module docstring); `node` is Celery's node name when the caller
    has it, else the node name of the Celery task being run in this thread, if any."""
    if jobs_settings.WORKER_NAME:
        return jobs_settings.WORKER_NAME
    return node or _celery_node_name() or socket.gethostname()


def _celery_node_name() -> str | None:
    hostname = getattr(getattr(current_task, "request", None), "hostname", None)
    return str(hostname) if hostname else None


def lease_owner_token() -> str:
    """A fresh lease-owner token per claim: `<worker>:<nonce>:<pid>`."""
    return f"{worker_identity()}:{secrets.token_hex(3)}:{os.getpid()}"


def lease_owner_worker(owner: str | None) -> tuple[str, int | None]:
    """`celery@host:5f0c2e:4242` -> ("celery@host", 4242); anything else is kept whole."""
    parts = (owner or "").rsplit(":", 2)
    if len(parts) == 3 and parts[2].isdigit():
        return parts[0], int(parts[2])
    return owner or "", None
