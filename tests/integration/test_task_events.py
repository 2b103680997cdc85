"""What Flower sees: a real worker with task events on (-E) broadcasts them for job tasks,
never for the relay's once-a-second tick (it would push the jobs off Flower's first page)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from celery import current_app
from django_celery_results.models import TaskResult

import jobs
from jobs.models import Job
from tests.harness import Harness, PrivateRedis, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class EventLog:
    """Every Celery event broadcast on one broker, captured by a receiver in a thread."""

    def __init__(self, broker_url: str) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._connection = current_app.connection_for_read(broker_url)
        self._receiver = current_app.events.Receiver(self._connection, handlers={"*": self._record})
        self._listening = threading.Event()
        ready = self._receiver.on_consume_ready

        def on_consume_ready(*args: Any, **kwargs: Any) -> None:
            ready(*args, **kwargs)
            self._listening.set()  # bound to the event exchange: nothing sent after is missed

        self._receiver.on_consume_ready = on_consume_ready
        self._thread = threading.Thread(target=self._run, name="event-log", daemon=True)

    def _record(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)

    def _run(self) -> None:
        for _ in self._receiver.itercapture(limit=None, timeout=None, wakeup=False):
            pass

    def start(self) -> None:
        self._thread.start()
        assert self._listening.wait(10), "the event receiver did not start"

    def stop(self) -> None:
        self._receiver.should_stop = True
        self._thread.join(timeout=10)
        self._connection.release()

    def task_events(self, task_id: str) -> list[str]:
        with self._lock:
            return [e["type"] for e in self.events if e.get("uuid") == task_id]

    def task_ids_named(self, name: str) -> set[str]:
        with self._lock:
            return {e["uuid"] for e in self.events if e.get("name") == name}


@pytest.fixture
def event_log(session_redis: PrivateRedis) -> Iterator[EventLog]:
    log = EventLog(session_redis.url)
    log.start()
    yield log
    log.stop()


def test_relay_tick_sends_no_task_events__worker_with_events_on(
    harness: Harness, event_log: EventLog, user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False  # the relay tick publishes the job itself
    harness.start_worker(
        "events-w1",
        queues="jobs,jobs.maintenance",
        args=("-E",),
        CELERY_WORKER_SEND_TASK_EVENTS="1",
    )
    job = jobs.submit(kind="noop", input={"n": 1}, owner=user)
    ticks = [
        current_app.send_task("outbox.relay_tick", queue="jobs.maintenance").id for _ in range(3)
    ]

    wait_until(
        lambda: TaskResult.objects.filter(task_id__in=ticks, status="SUCCESS").count() == 3,
        timeout=60,
        what="the worker to run three relay ticks",
    )
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded",
        timeout=60,
        what="the job the tick published to succeed",
    )
    (execute_id,) = wait_until(
        lambda: event_log.task_ids_named("jobs.execute"), what="the job task's events"
    )
    wait_until(
        lambda: "task-succeeded" in event_log.task_events(execute_id),
        what="the job task's task-succeeded event",
    )

    assert {"task-received", "task-started"} <= set(event_log.task_events(execute_id))
    assert not event_log.task_ids_named("outbox.relay_tick")
    assert all(event_log.task_events(tick) == [] for tick in ticks)
