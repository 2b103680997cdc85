"""The relay's sender (outbox.transport.task_sender): the message `send_task` makes, built from
what is worked out once per task and queue, over a producer the process keeps; read back from
the suite's private Redis and from RabbitMQ, run by a real worker, and refused by a broker that
is not there."""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery._state import _task_stack  # type: ignore[attr-defined]  # private
from django.utils import timezone

import jobs
import outbox.kombu_redis as kombu_redis
import outbox.transport as transport
from demo.procs import free_port
from jobs.models import Job
from outbox.models import OutboxEntry
from outbox.relay import outbox_relay_batch
from outbox.transport import RETRY_POLICY, celery_app, task_sender
from tests.conftest import point_celery_at
from tests.harness import ClosingBroker, Harness, PrivateRedis, queue_envelopes, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

KWARGS = {"job_id": "0195f0f0-0000-7000-8000-000000000000", "generation": 0, "kind": "noop"}


@pytest.fixture
def relay_only(settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False


def envelopes(client: redis.Redis, queue: str = "jobs") -> list[dict[str, Any]]:
    """Every message waiting in `queue` as kombu's Redis transport stored it, in the order
    consumers take them (every priority list; oldest first within each)."""
    return [json.loads(raw) for raw in queue_envelopes(client, queue)]


def _without_ids(envelope: dict[str, Any]) -> dict[str, Any]:
    """What two sends of the same task differ in: the task id (also the root and correlation
    id of a message with no parent) and kombu's delivery tag."""
    envelope = json.loads(json.dumps(envelope))
    headers, properties = envelope["headers"], envelope["properties"]
    task_id = headers.pop("id")
    if headers["root_id"] == task_id:
        headers.pop("root_id")
    assert properties.pop("correlation_id") == task_id
    properties.pop("delivery_tag")
    return envelope


@pytest.fixture
def inside_a_worker_task() -> Iterator[None]:
    """As if sent by a task a worker is running: its ids and priority are inherited."""
    task = celery_app().tasks["jobs.execute"]
    task.push_request(
        id="parent-id", root_id="root-id", called_directly=False, delivery_info={"priority": 3}
    )
    _task_stack.push(task)
    try:
        yield
    finally:
        _task_stack.pop()
        task.pop_request()


@pytest.mark.parametrize("name", ["jobs.execute", "jobs.execute_many", "not.registered.here"])
@pytest.mark.parametrize("parent", [False, True], ids=["no_parent", "in_a_worker_task"])
def test_a_message_from_the_sender__is_the_message_send_task_makes(
    broker: redis.Redis, request: pytest.FixtureRequest, name: str, parent: bool
) -> None:
    """Field by field, on the wire: headers (time limits, reprs, parentage), properties,
    routing and body; only the ids differ."""
    app = celery_app()
    assert "jobs.execute" in app.tasks  # a finalized app: both read the task's own options
    app.conf.task_inherit_parent_priority = parent
    if parent:
        request.getfixturevalue("inside_a_worker_task")
    try:
        app.send_task(
            name, kwargs=KWARGS, queue="jobs", ignore_result=True, argsrepr="()",
            kwargsrepr=repr(KWARGS), retry=True, retry_policy=RETRY_POLICY,
        )  # fmt: skip
        with task_sender(app) as send:
            send(name, KWARGS, "jobs")
    finally:
        app.conf.task_inherit_parent_priority = False

    # kombu's Redis transport keeps a priority's messages in a list of their own.
    by_send_task, by_sender = envelopes(broker, "jobs\x06\x163" if parent else "jobs")
    assert _without_ids(by_sender) == _without_ids(by_send_task)
    if name == "jobs.execute":
        assert by_sender["headers"]["timelimit"] == [900, 840]
    if parent:
        assert by_sender["headers"]["parent_id"] == "parent-id"
        assert by_sender["headers"]["root_id"] == "root-id"
        assert by_sender["properties"]["priority"] == 3


def test_jobs_published_by_the_sender__run_on_a_real_worker(
    harness: Harness, user: Any, settings: Any
) -> None:
    """The fast path's message and the relay's (a batch message too) are run by Celery."""
    harness.start_worker("w1")
    fast = jobs.submit(kind="noop", input={}, owner=user)
    settings.OUTBOX_FAST_PATH = False
    swept = [jobs.submit(kind="noop", input={"n": n}, owner=user) for n in range(3)]
    assert outbox_relay_batch().published == 3

    for job in (fast, *swept):
        wait_until(
            Job.objects.filter(pk=job.pk, state="succeeded").exists,
            timeout=30,
            what="job to succeed",
        )


def test_a_broker_that_is_not_there__backs_the_rows_off__the_next_sweep_publishes(
    broker: redis.Redis, session_redis: PrivateRedis, user: Any, relay_only: None
) -> None:
    """Connection refused: the publish is retried (RETRY_POLICY), then the row is pushed back
    with the error and no reservation. Once the broker answers, the next sweep publishes."""
    job = jobs.submit(kind="noop", input={}, owner=user)
    point_celery_at(f"redis://127.0.0.1:{free_port()}/0")
    try:
        result = outbox_relay_batch()
    finally:
        point_celery_at(session_redis.url)

    assert (result.published, result.failed) == (0, 1)
    row = OutboxEntry.objects.get(job_id=job.pk)
    assert row.published_at is None and row.reserved_until is None
    assert "Connection refused" in row.last_error or "Error 111" in row.last_error
    assert row.available_at > timezone.now()
    OutboxEntry.objects.filter(pk=row.pk).update(available_at=timezone.now())  # back-off over
    assert outbox_relay_batch().published == 1
    assert [e["headers"]["task"] for e in envelopes(broker)] == ["jobs.execute"]


def test_a_kept_connection_the_broker_closed__the_next_publish_still_arrives(
    broker: redis.Redis,
) -> None:
    app = celery_app()
    with task_sender(app) as send:
        send("jobs.execute", KWARGS, "jobs")
    broker.client_kill_filter(_type="normal", skipme=True)  # the kept connection is gone
    with task_sender(app) as send:
        send("jobs.execute", KWARGS, "jobs")

    assert len(envelopes(broker)) == 2


def test_a_publish_while_another_thread_holds_the_kept_producer__goes_through_the_pool(
    broker: redis.Redis,
) -> None:
    app = celery_app()
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            with task_sender(app) as send:
                send("jobs.execute", {**KWARGS, "generation": 2}, "jobs")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with task_sender(app) as send:
        send("jobs.execute", {**KWARGS, "generation": 1}, "jobs")
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(10)

    assert not errors
    sent = [json.loads(base64.b64decode(e["body"]))[1] for e in envelopes(broker)]
    assert sorted(kwargs["generation"] for kwargs in sent) == [1, 2]
    assert not transport._held[app._get_current_object()].lock.locked()  # type: ignore[attr-defined]


@pytest.fixture
def rabbitmq_queue(session_redis: PrivateRedis) -> Iterator[str]:
    """The in-process app pointed at RabbitMQ, and a queue of this test's own there."""
    from tests.integration.test_rabbitmq import AMQP_URL, _rabbitmq_up

    assert _rabbitmq_up(), "RabbitMQ must run on 127.0.0.1:5672 (scripts/ensure-services.sh)"
    queue = f"sender-{uuid.uuid4().hex[:8]}"
    point_celery_at(AMQP_URL)
    try:
        yield queue
    finally:
        with celery_app().connection_for_write() as conn:
            conn.default_channel.queue_delete(queue=queue)  # type: ignore[attr-defined]
        point_celery_at(session_redis.url)


def test_over_rabbitmq__the_message_from_the_sender_is_the_message_send_task_makes(
    rabbitmq_queue: str,
) -> None:
    """AMQP properties, headers and body, read back from the queue the sender declared."""
    app = celery_app()
    assert "jobs.execute" in app.tasks
    app.send_task(
        "jobs.execute", kwargs=KWARGS, queue=rabbitmq_queue, ignore_result=True, argsrepr="()",
        kwargsrepr=repr(KWARGS), retry=True, retry_policy=RETRY_POLICY,
    )  # fmt: skip
    with task_sender(app) as send:
        send("jobs.execute", KWARGS, rabbitmq_queue)

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        received = []
        for _ in range(2):
            message = channel.basic_get(rabbitmq_queue, no_ack=True)  # type: ignore[attr-defined]
            assert message is not None
            received.append(message)
    by_send_task, by_sender = (
        {
            "body": json.loads(m.body),
            "headers": {k: v for k, v in m.headers.items() if k not in ("id", "root_id")},
            "properties": {
                k: v
                for k, v in m.properties.items()
                if k not in ("correlation_id", "delivery_tag", "application_headers")
            },
            "routing_key": m.delivery_info["routing_key"],
        }
        for m in received
    )
    assert by_sender == by_send_task
    assert by_sender["headers"]["task"] == "jobs.execute"
    assert by_sender["properties"]["delivery_mode"] == 2  # persistent, as send_task's


def test_the_kept_producer_over_redis__reuses_one_client__and_follows_a_new_pool(
    broker: redis.Redis,
) -> None:
    """kombu builds a redis-py client per publish; the kept producer's channel builds one per
    connection pool (outbox.kombu_redis). After kombu drops its pools (what it does when the
    connection breaks), the next publish builds a client on the new pool, and arrives."""
    app = celery_app()
    with task_sender(app) as send:
        send("jobs.execute", {**KWARGS, "generation": 1}, "jobs")
        send("jobs.execute", {**KWARGS, "generation": 2}, "jobs")
    channel = transport._held[app._get_current_object()].producer_locked().channel  # type: ignore[attr-defined]
    assert isinstance(channel, kombu_redis.Channel)
    first = channel._kept_client
    with task_sender(app) as send:
        send("jobs.execute", {**KWARGS, "generation": 3}, "jobs")
    assert channel._kept_client is first and first.connection_pool is channel.pool

    channel._disconnect_pools()  # type: ignore[attr-defined]  # private
    with task_sender(app) as send:
        send("jobs.execute", {**KWARGS, "generation": 4}, "jobs")
    assert channel._kept_client is not first
    assert channel._kept_client.connection_pool is channel.pool
    sent = [json.loads(base64.b64decode(e["body"]))[1] for e in envelopes(broker)]
    assert [kwargs["generation"] for kwargs in sent] == [1, 2, 3, 4]


def test_a_broker_that_fails_the_connection__fails_the_rest_of_the_call_at_once(
    session_redis: PrivateRedis, user: Any, relay_only: None, settings: Any
) -> None:
    """60 rows in 60 messages: the first send's connection fails, so the 59 others are not
    tried (each would cost its own connects and retries: 30 s per 1,228 rows in an outage)
    and all 60 are backed off with that error, in one UPDATE per back-off."""
    settings.OUTBOX_BATCH_MAX = 1
    created = [jobs.submit(kind="noop", input={}, owner=user) for _ in range(60)]
    dead = ClosingBroker()
    point_celery_at(f"redis://127.0.0.1:{dead.port}/0")
    try:
        result = outbox_relay_batch()
    finally:
        point_celery_at(session_redis.url)
        dead.close()

    assert (result.published, result.failed) == (0, 60)
    rows = OutboxEntry.objects.filter(job_id__in=[j.pk for j in created])
    assert {(r.published_at, r.reserved_until) for r in rows} == {(None, None)}
    # One send's connects and retries (RETRY_POLICY), not 60 sends' worth.
    assert 1 <= dead.accepted <= 3 * (1 + int(RETRY_POLICY["max_retries"])), dead.accepted
    assert len({r.last_error for r in rows}) == 1
