"""A worker refuses settings under which the broker could redeliver a task still running."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery import Celery

from jobs.worker_checks import (
    UnsafeWorkerSettings,
    WorkerDelivery,
    check_worker_settings,
    redelivery_window,
    worker_delivery,
    worker_prefetch_lowered,
)


def conf(**overrides: Any) -> WorkerDelivery:
    base: dict[str, Any] = {
        "acks_late": True,
        "reject_on_worker_lost": True,
        "prefetch_multiplier": 1,
        "time_limit": 900,
        "broker_url": "redis://127.0.0.1:6379/0",
        "transport_options": {"visibility_timeout": 3600},
    }
    base.update(overrides)
    return WorkerDelivery(**base)


def test_check_worker_settings__sound_settings__pass() -> None:
    check_worker_settings(conf())


def test_check_worker_settings__time_limit_not_below_visibility_timeout__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="not comfortably below"):
        check_worker_settings(conf(time_limit=4000))


def test_check_worker_settings__time_limit_inside_safety_margin__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="keep it under 2880s"):
        check_worker_settings(conf(time_limit=3000))


def test_check_worker_settings__no_time_limit__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="task_time_limit"):
        check_worker_settings(conf(time_limit=None))


def test_check_worker_settings__early_ack__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="acks_late"):
        check_worker_settings(conf(acks_late=False))


def test_check_worker_settings__no_reject_on_worker_lost__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="reject_on_worker_lost"):
        check_worker_settings(conf(reject_on_worker_lost=False))


def test_check_worker_settings__prefetch_above_one__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="worker_prefetch_multiplier"):
        check_worker_settings(conf(prefetch_multiplier=4))


def test_check_worker_settings__rabbitmq_consumer_timeout__is_the_window(settings: Any) -> None:
    settings.JOBS_RABBITMQ_CONSUMER_TIMEOUT = 1800

    assert redelivery_window("amqp://guest@127.0.0.1//", {}) == 1800.0
    with pytest.raises(UnsafeWorkerSettings, match="1800"):
        check_worker_settings(conf(broker_url="amqp://guest@127.0.0.1//", time_limit=1700))


def test_redelivery_window__redis_default__is_one_hour() -> None:
    assert redelivery_window("redis://127.0.0.1:6379/0", {}) == 3600.0


def worker_of(queues: list[str], *, prefetch: int) -> SimpleNamespace:
    """A starting worker as `worker_init` sees it: its app (queues selected) and prefetch.
    A new app gets the library's shared tasks, `jobs.execute` with its own options."""
    app = Celery("worker-checks", set_as_current=False)
    app.conf.update(broker_url="redis://127.0.0.1:6379/0")
    app.amqp.queues.select(queues)
    return SimpleNamespace(app=app, prefetch_multiplier=prefetch)


def test_worker_delivery__worker_of_other_queues__is_not_checked() -> None:
    assert worker_delivery(worker_of(["emails"], prefetch=4)) is None


def test_worker_delivery__worker_of_the_jobs_queue__prefetch_four_refused() -> None:
    delivery = worker_delivery(worker_of(["emails", "jobs"], prefetch=4))

    assert delivery is not None
    assert (delivery.acks_late, delivery.reject_on_worker_lost) == (True, True)
    # The larger limit of jobs.execute (JOBS_TASK_TIME_LIMIT, 900) and jobs.execute_many
    # (that plus JOBS_BATCH_BUDGET_SECONDS, 5), both on the tasks themselves.
    assert delivery.time_limit == 905
    with pytest.raises(UnsafeWorkerSettings, match="prefetch_multiplier must be 1"):
        check_worker_settings(delivery)


def test_worker_delivery__task_options_win_over_the_projects_defaults() -> None:
    worker = worker_of(["jobs"], prefetch=1)
    worker.app.conf.task_acks_late = False  # the project's other tasks ack early

    delivery = worker_delivery(worker)

    assert delivery is not None
    check_worker_settings(delivery)


def test_worker_prefetch_lowered__celerys_default__becomes_one() -> None:
    worker = worker_of(["jobs"], prefetch=4)

    assert worker_prefetch_lowered(worker)
    delivery = worker_delivery(worker)
    assert delivery is not None and delivery.prefetch_multiplier == 1
    check_worker_settings(delivery)


def test_worker_prefetch_lowered__a_value_chosen_on_purpose__is_left_to_be_refused() -> None:
    worker = worker_of(["jobs"], prefetch=8)

    assert not worker_prefetch_lowered(worker)
    delivery = worker_delivery(worker)
    assert delivery is not None
    with pytest.raises(UnsafeWorkerSettings, match="got 8"):
        check_worker_settings(delivery)
