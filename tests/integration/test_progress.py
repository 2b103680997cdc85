"""ctx.progress end to end: written under the fence, throttled, shown by the API (and its
long-poll), the admin and /ops/, on the one-job and the batch path."""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import jobs
import tests.kinds_progress  # noqa: F401  (registers the progress kinds in this process too)
from jobs import batch
from jobs.claims import job_claim_id
from jobs.context import JobContext
from jobs.counters import STALE_WRITES_REJECTED, counter_value
from jobs.exceptions import LeaseLost
from jobs.leases import Lease
from jobs.models import Job
from jobs.progress import PROGRESS_INTERVAL_SECONDS
from jobs.runtime import Outcome
from outbox.models import OutboxEntry
from tests.harness import Harness, wait_until
from tests.integration.api_helpers import long_poll_while, submit, token_client
from tests.kinds_progress import THIEFS_PROGRESS

pytestmark = pytest.mark.django_db(transaction=True)

PROGRESS_UPDATE = re.compile(r'^UPDATE "jobs_job" SET "progress"')


@pytest.fixture(autouse=True)
def _rows_stay_in_the_outbox(settings: Any) -> None:
    """In-process runs: nothing is published."""
    settings.OUTBOX_FAST_PATH = False


def _progress_writes(queries: CaptureQueriesContext) -> int:
    return sum(1 for q in queries.captured_queries if PROGRESS_UPDATE.match(q["sql"]))


def _claimed(job: Job, worker: str = "progress-test:1:1") -> Lease:
    lease = job_claim_id(job.pk, worker=worker, kind=job.kind, kind_version=1).lease
    assert lease is not None
    return lease


def _submit_api(client: Any, kind: str, **input: Any) -> str:
    response = submit(client, {"kind": kind, "input": input})
    assert response.status_code == 202, response.content
    job_id: str = response.json()["id"]
    return job_id


# --- a real run ----------------------------------------------------------------------------


def test_progress_of_a_run__shown_by_the_api_the_last_value_kept(alice: Any) -> None:
    client = token_client(alice)
    job_id = _submit_api(client, "progress.loop_alone", n=50)
    assert client.get(f"/api/jobs/{job_id}/").json()["progress"] is None

    assert jobs.execute(job_id).outcome is Outcome.SUCCEEDED

    body = client.get(f"/api/jobs/{job_id}/").json()
    assert body["status"] == "succeeded"
    progress = body["progress"]
    assert set(progress) == {"done", "total", "message", "updated_at"}
    assert (progress["done"], progress["total"], progress["message"]) == (50, 50, "step 50")
    assert re.match(r"\d{4}-\d\d-\d\dT", progress["updated_at"])
    listed = client.get("/api/jobs/").json()["results"]
    assert [job["progress"]["done"] for job in listed] == [50]


def test_progress_while_a_real_worker_runs__seen_moving_through_the_long_poll(
    harness: Harness, alice: Any
) -> None:
    client = token_client(alice)
    job_id = _submit_api(client, "progress.loop_alone", n=30, step=0.1)
    harness.start_relay()
    harness.start_worker("w-progress", JOBS_HANDLER_MODULES="tests.kinds_progress")
    seen: list[tuple[str, int | None]] = []

    def finished() -> bool:
        body = client.get(f"/api/jobs/{job_id}/", {"wait": "5"}).json()
        seen.append((body["status"], (body["progress"] or {}).get("done")))
        return bool(body["status"] == "succeeded")

    wait_until(finished, timeout=90, what="the progress job to succeed on the real worker")
    assert seen[-1] == ("succeeded", 30)
    moving = [done for status, done in seen if status == "running" and done is not None]
    assert moving and all(0 < done < 30 for done in moving), seen
    assert moving == sorted(moving)


def test_tight_loop__writes_bounded_by_elapsed_time_and_the_last_value_written(
    user: Any,
) -> None:
    job = jobs.submit(kind="progress.loop_alone", input={"n": 1000}, owner=user)
    began = time.monotonic()
    with CaptureQueriesContext(connection) as queries:
        assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED
    elapsed = time.monotonic() - began
    writes = _progress_writes(queries)
    # The first report, one per full interval after it, and the flush at the handler's end.
    assert 1 <= writes <= 2 + elapsed / PROGRESS_INTERVAL_SECONDS, (writes, elapsed)
    assert writes < 20
    job.refresh_from_db()
    assert job.progress is not None
    assert (job.progress["done"], job.progress["total"]) == (1000, 1000)


def test_handler_that_never_reports__no_progress_write(user: Any) -> None:
    job = jobs.submit(kind="progress.silent", input={}, owner=user)
    with CaptureQueriesContext(connection) as queries:
        assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED
    assert _progress_writes(queries) == 0
    job.refresh_from_db()
    assert job.progress is None


def test_slow_steps__every_report_written(user: Any) -> None:
    job = jobs.submit(
        kind="progress.loop_alone", input={"n": 3, "step": PROGRESS_INTERVAL_SECONDS}, owner=user
    )
    with CaptureQueriesContext(connection) as queries:
        assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED
    assert _progress_writes(queries) == 3


# --- the fence -----------------------------------------------------------------------------


def test_stale_worker_progress__refused_and_the_new_owner_progress_kept(user: Any) -> None:
    job = jobs.submit(kind="progress.loop", input={"n": 1}, owner=user)
    ctx = JobContext(_claimed(job))
    ctx.progress(1, 4, "old owner")
    # The lease expires and another worker takes the job over.
    Job.objects.filter(pk=job.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    new_lease = _claimed(job, worker="progress-test:2:2")
    assert new_lease.generation == ctx.generation + 1
    new_ctx = JobContext(new_lease)
    new_ctx.progress(2, 4, "new owner")
    rejected = counter_value(STALE_WRITES_REJECTED)

    time.sleep(PROGRESS_INTERVAL_SECONDS)  # past the interval: this report writes at once
    with pytest.raises(LeaseLost):
        ctx.progress(3, 4, "old owner again")
    assert ctx.lease_lost
    assert counter_value(STALE_WRITES_REJECTED) == rejected + 1
    with pytest.raises(LeaseLost):
        ctx.progress(4, 4)  # lost stays lost: no more writes tried
    job.refresh_from_db()
    assert job.progress is not None
    assert (job.progress["done"], job.progress["message"]) == (2, "new owner")


def test_stale_worker_last_pending_progress__refused_at_the_handler_end(user: Any) -> None:
    job = jobs.submit(kind="progress.stolen", input={}, owner=user)
    rejected = counter_value(STALE_WRITES_REJECTED)
    assert jobs.execute(job.pk).outcome is Outcome.STALE
    assert counter_value(STALE_WRITES_REJECTED) > rejected
    job.refresh_from_db()
    assert job.progress == THIEFS_PROGRESS
    assert job.state == "leased" and job.result is None


@pytest.mark.parametrize(
    ("args", "error"), [((-1,), ValueError), ((5, 4), ValueError), (("1",), TypeError)]
)
def test_bad_arguments__refused_before_any_write(
    user: Any, args: tuple[Any, ...], error: type[Exception]
) -> None:
    job = jobs.submit(kind="progress.loop", input={"n": 1}, owner=user)
    ctx = JobContext(_claimed(job))
    with CaptureQueriesContext(connection) as queries, pytest.raises(error):
        ctx.progress(*args)
    assert _progress_writes(queries) == 0


# --- the batch path ------------------------------------------------------------------------


def _item(job: Job) -> dict[str, Any]:
    row = OutboxEntry.objects.filter(job_id=job.pk).order_by("-id").first()
    assert row is not None
    return dict(row.kwargs)


def test_batch__each_job_its_own_progress__stale_one_refused(user: Any) -> None:
    looping = [jobs.submit(kind="progress.loop", input={"n": n}, owner=user) for n in (200, 7)]
    silent = jobs.submit(kind="progress.silent", input={}, owner=user)
    stolen = jobs.submit(kind="progress.stolen", input={}, owner=user)
    every = [*looping, silent, stolen]
    reports = batch.execute_many([_item(job) for job in every])
    outcomes = {report.job_id: report.outcome for report in reports}
    assert outcomes == {
        str(looping[0].pk): Outcome.SUCCEEDED,
        str(looping[1].pk): Outcome.SUCCEEDED,
        str(silent.pk): Outcome.SUCCEEDED,
        str(stolen.pk): Outcome.STALE,
    }
    progress = {job.pk: Job.objects.get(pk=job.pk).progress for job in every}
    assert [(progress[j.pk] or {}).get("done") for j in looping] == [200, 7]
    assert progress[silent.pk] is None
    assert progress[stolen.pk] == THIEFS_PROGRESS


# --- the long-poll -------------------------------------------------------------------------


def test_wait_returns_as_soon_as_progress_changes(alice: Any, settings: Any) -> None:
    settings.JOBS_API_POLL_INTERVAL = 0.05
    client = token_client(alice)
    job_id = _submit_api(client, "progress.loop", n=1)
    ctx = JobContext(_claimed(Job.objects.get(pk=job_id)))
    ctx.progress(1, 3, "one")
    response, elapsed = long_poll_while(
        client, job_id, lambda: ctx.progress(2, 3, "two"), after=0.5
    )
    body = response.json()
    assert body["status"] == "running"
    assert (body["progress"]["done"], body["progress"]["message"]) == (2, "two")
    assert elapsed < 20


def test_wait__same_progress_keeps_waiting_until_the_deadline(alice: Any, settings: Any) -> None:
    settings.JOBS_API_POLL_INTERVAL = 0.05
    client = token_client(alice)
    job_id = _submit_api(client, "progress.loop", n=1)
    ctx = JobContext(_claimed(Job.objects.get(pk=job_id)))
    ctx.progress(1, 3, "one")
    began = time.monotonic()
    body = client.get(f"/api/jobs/{job_id}/", {"wait": "0.5"}).json()
    assert time.monotonic() - began >= 0.5
    assert body["progress"]["done"] == 1


# --- admin and /ops/ -----------------------------------------------------------------------


def test_admin_and_ops__show_the_progress_never_the_input(admin_client: Any, user: Any) -> None:
    job = jobs.submit(kind="progress.loop", input={"n": 1, "secret": "s3cr3t-input"}, owner=user)
    ctx = JobContext(_claimed(job))
    ctx.progress(3, 10, "rows parsed")

    change = admin_client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert change.status_code == 200
    assert "3 / 10 (30%) rows parsed" in change.content.decode()
    listing = admin_client.get("/admin/jobs/job/")
    assert "3 / 10 (30%) rows parsed" in listing.content.decode()

    ops = admin_client.get("/ops/")
    assert ops.status_code == 200
    page = ops.content.decode()
    assert 'id="running"' in page and "3 / 10 (30%) rows parsed" in page
    assert "s3cr3t-input" not in page
