"""The deployed maintenance loop: a real beat and workers store maintenance results only."""

from __future__ import annotations

from typing import Any

import pytest
from django_celery_results.models import TaskResult

import jobs
from jobs.models import Job, WorkerHeartbeat
from tests.harness import Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MAINTENANCE = {
    "outbox.relay_tick",
    "jobs.maintenance.reap",
    "jobs.maintenance.redeliver",
    "jobs.maintenance.reconcile",
}


def _stored_task_names() -> set[str]:
    return set(TaskResult.objects.values_list("task_name", flat=True))


def test_beat_runs_reconcile_and_stores_maintenance_results__never_job_results(
    harness: Harness, user: Any
) -> None:
    fast = {
        "OUTBOX_RELAY_INTERVAL": "0.5",
        "JOBS_REAP_INTERVAL": "0.5",
        "JOBS_RECONCILE_INTERVAL": "1",
        "JOBS_WORKER_HEARTBEAT_INTERVAL": "1",
    }
    harness.start_worker("maint", queues="jobs.maintenance", env=fast)
    harness.start_worker("w1", env=fast)
    harness.start_beat(env=fast)
    submitted = [jobs.submit(kind="noop", input={"n": n}, owner=user) for n in range(3)]
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=[j.pk for j in submitted], state="succeeded").count() == 3
        ),
        timeout=60,
        what="jobs to succeed",
    )
    wait_until(
        lambda: _stored_task_names() >= MAINTENANCE,
        timeout=90,
        what="beat to run relay, reap and reconcile with stored results",
    )

    assert "jobs.execute" not in _stored_task_names()
    reconcile = TaskResult.objects.filter(task_name="jobs.maintenance.reconcile").first()
    assert reconcile is not None and reconcile.status == "SUCCESS"
    assert '"ok": true' in reconcile.result
    seen = set(WorkerHeartbeat.objects.values_list("name", flat=True))
    assert {name.split("@")[0] for name in seen} >= {"maint", "w1"}
