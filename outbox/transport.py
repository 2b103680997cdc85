"""The Celery app the outbox publishes through (the project's, never a default one), and how
it sends a task message: the message `send_task` makes, over a producer the process keeps
(one broker connection per publishing process, besides Celery's pool); and the transport the
project's workers use over plain redis:// (`worker_transport`)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from celery import Celery, current_app
from django.utils.module_loading import import_string
from kombu import Connection, Producer
from kombu.utils.uuid import uuid

from .batching import broker_priority
from .conf import outbox_settings
from .exceptions import BrokerNotConfigured
from .kombu_redis import TRANSPORT_PATH, with_kept_client

logger = logging.getLogger(__name__)


@cache
def _app_at(path: str) -> Celery:
    app = import_string(path)
    if not isinstance(app, Celery):
        raise TypeError(
            f"OUTBOX_CELERY_APP={path!r} names a {type(app).__name__}, not a Celery app"
        )
    return app


def celery_app() -> Celery:
    """OUTBOX_CELERY_APP when set, else the current app (the one the project's celery.py made)."""
    if outbox_settings.CELERY_APP:
        return _app_at(outbox_settings.CELERY_APP)
    return current_app  # a proxy: whichever app is current when it is used


def broker_url(app: Celery) -> str:
    """The broker URL the app will use, or "" when none was configured.

    Celery falls back to amqp://guest@localhost when nothing names a broker; a message sent
    there reaches no worker of this project, so an empty answer is a refusal, not a default.
    """
    return str(os.environ.get("CELERY_BROKER_URL") or app.conf.broker_url or "")


def require_broker(app: Celery) -> str:
    url = broker_url(app)
    if not url:
        raise BrokerNotConfigured(
            f"the Celery app {app.main!r} has no broker URL: set CELERY_BROKER_URL in your "
            "Django settings (with config_from_object('django.conf:settings', namespace="
            "'CELERY')) or broker_url on the app, or name your app in OUTBOX_CELERY_APP"
        )
    return url


# --- sending task messages -------------------------------------------------------------------
#
# `app.send_task` works out the same things for every message of a task name and queue (the
# task's options, routing, Celery settings), builds an AsyncResult nobody reads, and its
# producer, acquired from the pool, is bound to a channel again each time: about 30% of a
# publish over Redis. The sender below makes the message send_task makes, with the calls
# send_task makes (`amqp.create_task_message`, `amqp.send_task_message`: the queue's
# declaration, the publish signals, retries and errors), from what it worked out once per
# task name and queue, over a producer the process keeps.
# tests/integration/test_relay_sender.py compares the two messages on the wire.

RETRY_POLICY = {"max_retries": 2, "interval_start": 0.05}


@dataclass(frozen=True)
class _Plan:
    """What `send_task` works out before building a message of `name` for `queue`."""

    options: dict[str, Any]  # routed (queue is a kombu Queue) and the task's own options
    time_limit: float | None
    soft_time_limit: float | None
    sent_event: bool
    route_each: bool  # the project has task_routes: route every message (they may look at it)
    task: Any  # the registered task, or None (send_task's task_type)


_plans: dict[tuple[Celery, str, str, Any], _Plan | None] = {}


def _plan_of(app: Celery, name: str, queue: str) -> _Plan | None:
    """send_task's option handling for `name` on `queue` (celery.app.base.Celery.send_task);
    None when a message needs more than this (a task with `expires`): send_task makes it."""
    task = app._tasks.get(name)  # type: ignore[attr-defined]  # as send_task: no finalize
    key = (app, name, queue, task)
    if key in _plans:
        return _plans[key]
    options: dict[str, Any] = {}
    if task is not None and hasattr(task, "_get_exec_options"):
        options = {k: v for k, v in task._get_exec_options().items() if v is not None}
    options["queue"] = queue
    time_limit = options.pop("time_limit", None)
    soft_time_limit = options.pop("soft_time_limit", None)
    plan = None
    if options.pop("expires", None) is None:
        route_each = bool(app.amqp.routes)
        plan = _Plan(
            options=options if route_each else app.amqp.router.route(options, name, (), {}, task),
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            sent_event=bool(app.conf.task_send_sent_event),
            route_each=route_each,
            task=task,
        )
    _plans[key] = plan
    return plan


def _parentage(app: Celery, options: dict[str, Any]) -> tuple[str | None, str | None]:
    """root_id and parent_id when sent from inside a worker's task (which may also lend its
    priority, task_inherit_parent_priority), as send_task sets them."""
    parent = app.current_worker_task
    if not parent:
        return None, None
    request = parent.request
    if app.conf.task_inherit_parent_priority:
        options.setdefault("priority", (request.delivery_info or {}).get("priority"))
    return request.root_id or request.id, request.id


def task_message_send(
    app: Celery,
    producer: Producer,
    name: str,
    kwargs: dict[str, Any],
    queue: str,
    priority: int | None = None,
) -> None:
    """Publish `name(**kwargs)` to `queue`: the protocol-2 message `app.send_task` publishes
    (ignore_result, retried per RETRY_POLICY on broker errors, which then raise). `priority`:
    the message's broker priority (outbox.batching.broker_priority); None: the task's own, as
    send_task gives it."""
    kwargsrepr = repr(kwargs)  # a few ids: plain repr, not Celery's slower saferepr
    plan = _plan_of(app, name, queue)
    given = {} if priority is None else {"priority": priority}
    if plan is None:
        app.send_task(
            name, kwargs=kwargs, queue=queue, producer=producer, ignore_result=True,
            argsrepr="()", kwargsrepr=kwargsrepr, retry=True, retry_policy=RETRY_POLICY,
            **given,  # type: ignore[arg-type]  # celery-types lacks send_task's **options
        )  # fmt: skip
        return
    options = dict(
        plan.options,
        argsrepr="()",
        kwargsrepr=kwargsrepr,
        retry=True,
        retry_policy=RETRY_POLICY,
        **given,
    )
    if plan.route_each:
        options = app.amqp.router.route(options, name, (), kwargs, plan.task)
    root_id, parent_id = _parentage(app, options)
    task_id = uuid()
    message = app.amqp.create_task_message(
        task_id,
        name,
        args=(),
        kwargs=kwargs,
        reply_to=app.thread_oid,
        time_limit=plan.time_limit,
        soft_time_limit=plan.soft_time_limit,
        create_sent_event=plan.sent_event,
        root_id=root_id,
        parent_id=parent_id,
        ignore_result=True,
        replaced_task_nesting=0,
        **options,
    )
    # send_task's: a transport's own connection errors surface as kombu's.
    with producer.connection._reraise_as_library_errors():  # type: ignore[union-attr]
        app.amqp.send_task_message(producer, name, message, **options)


class _Held:
    """The producer this process keeps for one app and broker URL: no pool acquire and no
    channel re-bind per publish. One thread uses it at a time; the others use the pool."""

    def __init__(self, app: Celery, url: str) -> None:
        self.app, self.url, self.pid = app, url, os.getpid()
        self.lock = threading.Lock()
        self.producer: Producer | None = None

    def producer_locked(self) -> Producer:
        if self.producer is None:
            connection = with_kept_client(self.app.connection_for_write())
            self.producer = self.app.amqp.Producer(connection)
        return self.producer

    def drop_locked(self) -> None:
        """Close the connection (after a broker error, or a new URL): the next publish starts
        on a fresh one, as one from the pool would."""
        producer, self.producer = self.producer, None
        if producer is not None and producer.connection is not None:
            try:
                producer.connection.close()
            except Exception:  # pragma: no cover - a dead connection may fail to close
                logger.debug("outbox: closing a held broker connection failed", exc_info=True)


_held_lock = threading.Lock()
_held: dict[Celery, _Held] = {}


def _held_for(app: Celery, url: str) -> _Held:
    with _held_lock:
        held = _held.get(app)
        if held is not None and held.pid == os.getpid() and held.url == url:
            return held
        if held is not None and held.pid == os.getpid() and held.lock.acquire(blocking=False):
            try:
                held.drop_locked()  # the app was pointed at another broker
            finally:
                held.lock.release()
        held = _held[app] = _Held(app, url)
        return held


def _after_fork_in_child() -> None:
    """A child never uses (nor closes) the parent's connections: it makes its own."""
    global _held_lock
    _held_lock = threading.Lock()
    _held.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Send(Protocol):
    """One publish of `task_sender`. `priority` is the row's (-100..100):
    outbox.batching.broker_priority maps it to the number of the producer's transport; None
    sends what send_task would (the task's own, or its parent's)."""

    def __call__(
        self, name: str, kwargs: dict[str, Any], queue: str, priority: int | None = None
    ) -> None: ...


def _driver_type(producer: Producer) -> str:
    """kombu's name of the transport under `producer` ("redis", "amqp", ...)."""
    connection = producer.connection
    return "" if connection is None else str(getattr(connection.transport, "driver_type", ""))


def _on_broker(priority: int | None, producer: Producer) -> int | None:
    return None if priority is None else broker_priority(priority, _driver_type(producer))


@contextmanager
def task_sender(app: Celery) -> Iterator[Send]:
    """`send(name, kwargs, queue, priority)` for one publish call (task_message_send), over
    the producer this process keeps when no other thread is using it, else over one from the
    pool."""
    app = getattr(app, "_get_current_object", lambda: app)()  # current_app is a proxy
    held = _held_for(app, require_broker(app))
    if not held.lock.acquire(blocking=False):
        with app.producer_or_acquire() as pooled:

            def send_pooled(
                name: str, kwargs: dict[str, Any], queue: str, priority: int | None = None
            ) -> None:
                on_broker = _on_broker(priority, pooled)
                task_message_send(app, pooled, name, kwargs, queue, on_broker)

            yield send_pooled
        return
    try:

        def send(
            name: str, kwargs: dict[str, Any], queue: str, priority: int | None = None
        ) -> None:
            try:
                producer = held.producer_locked()
                task_message_send(
                    app, producer, name, kwargs, queue, _on_broker(priority, producer)
                )
            except BaseException:
                held.drop_locked()
                raise

        yield send
    finally:
        held.lock.release()


def worker_transport(app: Celery) -> bool:
    """Point `app`'s broker connections at `outbox.kombu_redis.Transport` (worker_init, so
    before the worker connects) when the project left `broker_transport` unset and the broker
    URL is plain `redis://` over kombu's own transport: a worker whose Redis restarts under it
    reconnects instead of exiting. Returns whether it did."""
    if app.conf.broker_transport:
        return False
    connection = Connection(broker_url(app))
    if with_kept_client(connection) is connection:  # not plain redis:// (with_kept_client)
        return False
    app.conf.broker_transport = TRANSPORT_PATH
    return True
