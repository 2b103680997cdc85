"""Shared fixtures: users and tenants, a private Redis per session, real-process harness."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from demo.guided.processes import point_celery_at
from tests.harness import Harness, PrivateRedis, harness_for
from tests.production_server import ProductionServer, collect_static, production_server


@pytest.fixture(scope="session")
def session_redis() -> Iterator[PrivateRedis]:
    """Our own redis-server for the whole run: tests never touch anyone else's queues."""
    redis = PrivateRedis()
    redis.start()
    yield redis
    redis.close()


@pytest.fixture(scope="session", autouse=True)
def _celery_on_private_redis(session_redis: PrivateRedis) -> None:
    point_celery_at(session_redis.url)


@pytest.fixture
def lossy_redis(session_redis: PrivateRedis) -> Iterator[PrivateRedis]:
    """A Redis of this test's own, killed and restarted by it; celery points back after."""
    with celery_on_private_redis(back=session_redis.url) as private:
        yield private


@contextlib.contextmanager
def celery_on_private_redis(
    *, back: str, also_bind: tuple[str, ...] = ()
) -> Iterator[PrivateRedis]:
    """A Redis of the caller's own, this process's Celery app on it for the block (then on
    `back`); removed after."""
    private = PrivateRedis(also_bind=also_bind)
    private.start()
    try:
        with celery_at(private.url, back=back):
            yield private
    finally:
        private.close()


@contextlib.contextmanager
def celery_at(url: str, *, back: str) -> Iterator[None]:
    """This process's Celery app on the broker at `url` for the block, then on `back`."""
    point_celery(url)
    try:
        yield
    finally:
        point_celery(back)


def point_celery(url: str) -> None:
    """point_celery_at, and drop the producer pool, which would keep the closed connection pool."""
    from jobsite.celery import app

    point_celery_at(url)
    app.amqp._producer_pool = None  # type: ignore[attr-defined]  # kombu private


def broker_back__worker_runs_a_job(redis: PrivateRedis, worker: Any, owner: Any) -> None:
    """Start `redis` again, point this process's Celery at it, and wait until `worker` (still
    alive after) has run a job submitted after the broker's return."""
    import jobs
    from jobs.models import Job
    from tests.harness import wait_until

    redis.start()
    point_celery(redis.url)
    after = jobs.submit(kind="noop", input={"after": "broker back"}, owner=owner)
    wait_until(
        lambda: Job.objects.get(pk=after.pk).state == "succeeded",
        timeout=60,
        what="a job submitted after the broker's return to run on the same worker",
    )
    assert worker.alive(), worker.log()[-3000:]


@pytest.fixture
def broker(session_redis: PrivateRedis) -> Iterator[Any]:
    """A client of the private Redis the in-process Celery app publishes to, emptied first."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=session_redis.port, db=0)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def calls_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where tests/kinds_batch.py's handlers note each call (JOBS_TEST_CALLS_FILE)."""
    from tests.kinds_batch import CALLS_FILE_ENV

    path = str(tmp_path / "calls.txt")
    monkeypatch.setenv(CALLS_FILE_ENV, path)
    return path


def redis_flushall(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"FLUSHALL\r\n")
        assert sock.recv(16).startswith(b"+OK")


@pytest.fixture(scope="session", autouse=True)
def _outbox_marks_stopped_before_the_database_goes(
    django_db_setup: Any, django_db_blocker: Any
) -> Iterator[None]:
    """The fast path's publisher and mark threads hold connections to the test database; end
    them before pytest-django drops that database (this fixture is torn down first)."""
    yield
    from outbox import fastpath, marks

    with django_db_blocker.unblock():
        fastpath.stop()
        marks.stop()


@pytest.fixture(autouse=True)
def _outbox_marks_settled(django_db_blocker: Any) -> Iterator[None]:
    """Marks queued by a test's fast path are made before the next test starts, not by the
    mark thread in the middle of it (outbox/marks.py batches them per process)."""
    yield
    from outbox import marks

    with django_db_blocker.unblock():
        marks.flush()


@pytest.fixture(autouse=True)
def _fast_path_unpaused() -> Iterator[None]:
    """A test that met a broker down (outbox.breaker) leaves the next one's fast path as new."""
    from outbox.breaker import breaker

    breaker.reset()
    yield
    breaker.reset()


@pytest.fixture(autouse=True)
def _scan_floors_forgotten() -> Iterator[None]:
    """Each test's periodic scans start from their index's start (outbox.floors): a floor a
    test left would hide the rows the next test writes with old keys."""
    from jobs.ops.redeliver import due_floor as jobs_due_floor
    from jobs.reaper import lease_floor
    from outbox.relay import due_floor

    floors = (due_floor, jobs_due_floor, lease_floor)
    for floor in floors:
        floor.reset()
    yield
    for floor in floors:
        floor.reset()


@pytest.fixture(autouse=True)
def _media_root(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="alice", password="pw")


@pytest.fixture
def other_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="bob", password="pw")


@pytest.fixture
def tenant(user: Any) -> Any:
    from jobs.models import Tenant

    team = Tenant.objects.create(name="acme")
    team.members.add(user)
    return team


@pytest.fixture
def harness(
    session_redis: PrivateRedis, transactional_db: None, settings: Any
) -> Iterator[Harness]:
    """Real worker/relay/provider processes on the test database and the private Redis."""
    redis_flushall(session_redis.port)
    with harness_for(session_redis.url) as h:
        settings.MEDIA_ROOT = h.media_root
        yield h


@pytest.fixture(scope="session")
def production_static(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """STATIC_ROOT collected with the production storage (hashed names and a manifest), once
    per session: tests copy it before they change anything in it."""
    root = tmp_path_factory.mktemp("static-production")
    collect_static(root)
    return root


@pytest.fixture
def production_web(
    harness: Harness, production_static: Path, settings: Any
) -> Iterator[ProductionServer]:
    """The Dockerfile's web server (gunicorn + uvicorn, DJANGO_ENV=production) over HTTP."""
    settings.OUTBOX_FAST_PATH = False  # nothing here needs the broker
    with production_server(harness, production_static) as running:
        yield running
