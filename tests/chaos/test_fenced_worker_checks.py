"""A real worker refuses to start when its time limit is not below the redelivery window."""

from __future__ import annotations

import pytest

from tests.harness import Harness, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]


def test_worker_with_time_limit_above_visibility_timeout__refuses_to_start(
    harness: Harness,
) -> None:
    worker = harness.start_worker(
        "unsafe", wait=False, JOBS_TASK_TIME_LIMIT="4000", JOBS_TASK_SOFT_TIME_LIMIT="3900"
    )

    wait_until(lambda: not worker.alive(), timeout=60, what="the unsafe worker to exit")
    assert worker.popen.returncode != 0
    log = worker.log()
    assert "refusing to start" in log
    # The larger of the two tasks' limits: jobs.execute_many adds the batch budget (5 s).
    assert "task_time_limit=4005s is not comfortably below" in log
    assert "JOBS_TASK_TIME_LIMIT + JOBS_BATCH_BUDGET_SECONDS" in log
    assert "ready." not in log


def test_worker_with_safe_time_limit__starts(harness: Harness) -> None:
    worker = harness.start_worker("safe", JOBS_TASK_TIME_LIMIT="60", JOBS_TASK_SOFT_TIME_LIMIT="50")

    assert worker.alive()


def test_worker_of_the_jobs_queue_with_prefetch_eight__refuses_to_start(harness: Harness) -> None:
    worker = harness.start_worker("greedy", wait=False, args=("--prefetch-multiplier=8",))

    wait_until(lambda: not worker.alive(), timeout=60, what="the greedy worker to exit")
    assert worker.popen.returncode == 78
    assert "worker_prefetch_multiplier must be 1 for a worker of a jobs queue (got 8)" in (
        worker.log()
    )


def test_worker_of_other_queues_with_prefetch_eight__starts(harness: Harness) -> None:
    worker = harness.start_worker("emails", queues="emails", args=("--prefetch-multiplier=8",))

    assert worker.alive()
