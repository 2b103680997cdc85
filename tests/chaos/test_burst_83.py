"""Seed drill: a burst of 83 jobs accepted during a worker outage, into a provider with
limited capacity. All finish, once each, and the oldest-queued age rises then drains to zero.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import tests.kinds_chaos  # noqa: F401 - registers the chaos kinds in this (submitting) process
from jobs.models import EffectLedgerEntry, Job
from jobs.submission import job_submit
from tests.chaos.checker import check_run
from tests.chaos.soak import oldest_queued_age
from tests.harness import Harness, wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

BURST = 83
CHAOS_WORKER_ENV = {"JOBS_HANDLER_MODULES": "tests.kinds_chaos", "NOTIFY_PROVIDER_TIMEOUT": "2"}


class AgeSampler:
    """Samples (seconds since start, oldest-queued age, active jobs) for the report."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.samples: list[tuple[float, float, int]] = []

    def sample(self) -> tuple[float, float, int]:
        age, active, _ = oldest_queued_age()
        row = (round(time.monotonic() - self.started, 2), round(age, 2), active)
        self.samples.append(row)
        return row

    def report(self) -> str:
        lines = ["   t(s)  oldest_queued_age(s)  active"]
        lines += [f"{t:7.1f}  {age:20.2f}  {active:6d}" for t, age, active in self.samples]
        return "\n".join(lines)


def test_burst_after_outage_into_limited_provider__all_finish_once_and_backlog_drains(
    harness: Harness, user: Any
) -> None:
    harness.start_provider(work_seconds=0.25)
    harness.provider_control(capacity=2)  # more concurrent requests answer 429
    harness.start_relay(interval=0.1)
    sampler = AgeSampler()

    # The outage: no worker is running while the burst is accepted.
    ids: set[str] = set()
    for i in range(BURST):
        job = job_submit(kind="chaos.notify", input={"before": 0, "after": 0, "n": i}, owner=user)
        ids.add(str(job.pk))
        if i % 20 == 0:
            sampler.sample()
    assert Job.objects.filter(pk__in=ids, state="queued").count() == BURST
    # The backlog keeps ageing while nobody serves it.
    target = sampler.sample()[1] + 2.0
    wait_until(
        lambda: sampler.sample()[1] >= target,
        timeout=30,
        interval=0.5,
        what="the oldest queued job to wait 2 s longer",
    )
    outage_ages = [age for _, age, _ in sampler.samples]
    assert outage_ages == sorted(outage_ages), "age must only grow while workers are down"

    # Recovery: 8 slots race for a provider that serves 2 at a time.
    workers = [
        harness.start_worker(name, concurrency=4, wait=False, env=CHAOS_WORKER_ENV)
        for name in ("burst-w1", "burst-w2")
    ]
    wait_until(
        lambda: sampler.sample()[2] == 0, timeout=240, interval=0.5, what="all 83 jobs to finish"
    )
    final = sampler.sample()
    assert all(worker.alive() for worker in workers)
    print(f"\noldest-queued age during the 83-job burst:\n{sampler.report()}")

    assert Job.objects.filter(pk__in=ids, state="succeeded").count() == BURST
    stats = harness.provider_stats()
    assert stats["notices"] == BURST
    assert stats["rejected_for_capacity"] > 0, "the capacity limit never bit: drill too gentle"
    assert stats["max_in_flight"] <= 2
    # Once each: one applied ledger row per job and one notice held per key. A 429 is not a
    # recorded request; a key is requested again (a timeout or a lost lease on a loaded
    # machine: same key, one logical send) never more often than the ledger began it.
    applied = {
        e.idempotency_key: e
        for e in EffectLedgerEntry.objects.filter(job_id__in=ids, name="notice", state="applied")
    }
    assert len(applied) == BURST
    assert stats["notices_by_key"] == dict.fromkeys(applied, 1)
    assert sorted(stats["requests_by_key"]) == sorted(applied)
    for key, requests in stats["requests_by_key"].items():
        assert 1 <= requests <= applied[key].calls, (key, requests, applied[key].calls)
    # 429s were retried as transient failures, with the same key, not as new sends.
    assert Job.objects.filter(pk__in=ids, attempt__gt=1).exists()
    report = check_run(
        accepted=ids,
        expected={"chaos.notify": {"succeeded"}},
        provider=stats,
        require_fences=False,
    )
    assert report.ok, report.violations
    # The backlog went up and drained back to zero.
    assert max(age for _, age, _ in sampler.samples) > 0
    assert final[1] == 0 and final[2] == 0
