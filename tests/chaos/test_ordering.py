"""Per-key order, version races and fairness with real worker processes (issue 7)."""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import pairwise
from typing import Any

import pytest

import jobs
from documents.models import DocumentIndex, DocumentIndexLog
from documents.services import document_create, document_revise
from jobs.models import Job, JobEvent, Tenant
from tests.harness import Harness, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

TEST_KINDS = {"JOBS_HANDLER_MODULES": "tests.kinds_ordering"}


@pytest.fixture(autouse=True)
def _test_kinds() -> None:
    import tests.kinds_ordering  # noqa: F401  (registers the kinds in this process too)


def _all_finished(ids: list[Any]) -> bool:
    return not Job.objects.filter(pk__in=ids, finished_at__isnull=True).exists()


def test_three_versions_race__index_ends_at_newest_and_never_goes_back(
    harness: Harness, user: Any
) -> None:
    harness.start_worker("w1", concurrency=2)
    harness.start_worker("w2", concurrency=2)
    rng = random.Random(7)
    docs = [document_create(owner=user, title=f"doc {n}") for n in range(8)]
    job_ids = []
    for doc in docs:
        for version in range(1, 4):
            _, job = document_revise(
                document=doc,
                text=f"text of version {version} " * version,
                actor=user,
                serialize=False,
                work_seconds=rng.uniform(0.0, 0.3),
            )
            job_ids.append(job.pk)
    wait_until(lambda: _all_finished(job_ids), timeout=90, what="all index jobs to finish")
    for doc in docs:
        assert DocumentIndex.objects.get(document=doc).version == 3
        applied = list(
            DocumentIndexLog.objects.filter(document=doc, applied=True).values_list(
                "version", flat=True
            )
        )
        # Checked after every completion: each applied publish is newer than the one before.
        assert applied == sorted(applied) and len(set(applied)) == len(applied), applied
        assert applied[-1] == 3
    states = set(Job.objects.filter(pk__in=job_ids).values_list("state", flat=True))
    assert states <= {"succeeded", "cancelled"}


def _intervals(job_ids: list[Any]) -> dict[Any, tuple[Any, Any]]:
    spans = {}
    for job_id in job_ids:
        events = list(JobEvent.objects.filter(job_id=job_id).order_by("at", "id"))
        started = next(e.at for e in events if e.to_state == "leased")
        ended = next(e.at for e in events if e.to_state == "succeeded")
        spans[job_id] = (started, ended)
    return spans


def test_serialization_key__start_order_is_acceptance_order_and_jobs_never_overlap(
    harness: Harness, user: Any
) -> None:
    harness.start_worker("w1", concurrency=4, env=TEST_KINDS)
    rng = random.Random(11)
    by_key: dict[str, list[Any]] = defaultdict(list)
    for n in range(24):
        key = f"conversation:{n % 4}"
        job = jobs.submit(
            kind="ordering.work",
            input={"n": n, "seconds": rng.uniform(0.02, 0.15)},
            owner=user,
            serialization_key=key,
        )
        by_key[key].append(job.pk)
    every = [pk for pks in by_key.values() for pk in pks]
    wait_until(lambda: _all_finished(every), timeout=120, what="serialized jobs to finish")
    assert set(Job.objects.filter(pk__in=every).values_list("state", flat=True)) == {"succeeded"}
    parallel_keys = 0
    all_spans = _intervals(every)
    for key, pks in by_key.items():
        spans = [all_spans[pk] for pk in pks]  # pks are in acceptance order
        starts = [start for start, _ in spans]
        assert starts == sorted(starts), f"{key}: start order differs from acceptance order"
        for (_, end), (next_start, _) in pairwise(spans):
            assert end <= next_start, f"{key}: two jobs of one key overlapped"
    # No global serialization: jobs of different keys did run at the same time.
    ordered = sorted(all_spans.values())
    for (_, end), (next_start, _) in pairwise(ordered):
        if next_start < end:
            parallel_keys += 1
    assert parallel_keys > 0


def test_tenant_flood_does_not_delay_another_tenants_job(
    harness: Harness, user: Any, other_user: Any
) -> None:
    flood_team = Tenant.objects.create(name="flood")
    flood_team.members.add(user)
    quiet_team = Tenant.objects.create(name="quiet")
    quiet_team.members.add(other_user)
    job_seconds = 1.0
    harness.start_worker("w1", concurrency=2, env=TEST_KINDS)
    for n in range(1000):
        jobs.submit(
            kind="fair.work", input={"n": n, "seconds": job_seconds}, owner=user, tenant=flood_team
        )
    wait_until(
        lambda: Job.objects.filter(tenant=flood_team, state="leased").exists(),
        timeout=30,
        what="the flood to start",
    )
    quiet = jobs.submit(
        kind="fair.work", input={"n": -1, "seconds": 0.1}, owner=other_user, tenant=quiet_team
    )
    wait_until(
        lambda: Job.objects.get(pk=quiet.pk).state == "succeeded",
        timeout=30,
        what="the quiet tenant's job",
    )
    quiet = Job.objects.get(pk=quiet.pk)
    assert quiet.started_at is not None
    waited = (quiet.started_at - quiet.created_at).total_seconds()
    # 2 worker processes, the flood capped at 1 leased job: one worker is always free.
    assert waited < job_seconds, f"quiet tenant waited {waited:.2f}s behind the flood"
    leased_at_once = Job.objects.filter(tenant=flood_team, state="leased").count()
    assert leased_at_once <= 1


def test_kind_quota__never_more_than_its_limit_leased_at_once(harness: Harness, user: Any) -> None:
    harness.start_worker("w1", concurrency=4, env=TEST_KINDS)
    ids = [
        jobs.submit(kind="quota.work", input={"n": n, "seconds": 0.2}, owner=user).pk
        for n in range(12)
    ]
    wait_until(lambda: _all_finished(ids), timeout=120, what="quota jobs to finish")
    spans = sorted(_intervals(ids).values())
    for start, _ in spans:
        running = sum(1 for s, e in spans if s <= start < e)
        assert running <= 2, f"{running} quota.work jobs ran at once (limit 2)"
