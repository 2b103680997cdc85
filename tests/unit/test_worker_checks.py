"""A worker refuses settings under which the broker could redeliver a task still running."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from jobs.worker_checks import UnsafeWorkerSettings, check_worker_settings, redelivery_window


def conf(**overrides: Any) -> SimpleNamespace:
    base: dict[str, Any] = {
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": 900,
        "broker_url": "redis://127.0.0.1:6379/0",
        "broker_transport_options": {"visibility_timeout": 3600},
    }
    base.update(overrides)
    return SimpleNamespace(**base)


def test_check_worker_settings__sound_settings__pass() -> None:
    check_worker_settings(conf())


def test_check_worker_settings__time_limit_not_below_visibility_timeout__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="not comfortably below"):
        check_worker_settings(conf(task_time_limit=4000))


def test_check_worker_settings__time_limit_inside_safety_margin__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="keep it under 2880s"):
        check_worker_settings(conf(task_time_limit=3000))


def test_check_worker_settings__no_time_limit__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="task_time_limit"):
        check_worker_settings(conf(task_time_limit=None))


def test_check_worker_settings__early_ack__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="task_acks_late"):
        check_worker_settings(conf(task_acks_late=False))


def test_check_worker_settings__no_reject_on_worker_lost__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="task_reject_on_worker_lost"):
        check_worker_settings(conf(task_reject_on_worker_lost=False))


def test_check_worker_settings__prefetch_above_one__refused() -> None:
    with pytest.raises(UnsafeWorkerSettings, match="worker_prefetch_multiplier"):
        check_worker_settings(conf(worker_prefetch_multiplier=4))


def test_check_worker_settings__rabbitmq_consumer_timeout__is_the_window(settings: Any) -> None:
    settings.JOBS_RABBITMQ_CONSUMER_TIMEOUT = 1800

    assert redelivery_window("amqp://guest@127.0.0.1//", {}) == 1800.0
    with pytest.raises(UnsafeWorkerSettings, match="1800"):
        check_worker_settings(conf(broker_url="amqp://guest@127.0.0.1//", task_time_limit=1700))


def test_redelivery_window__redis_default__is_one_hour() -> None:
    assert redelivery_window("redis://127.0.0.1:6379/0", {}) == 3600.0
