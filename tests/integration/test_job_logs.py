"""One worker identity and job fields on every job line, from real worker processes.

The worker here has no JOBS_WORKER_NAME: its name is Celery's node name, as Flower shows it.
"""

from __future__ import annotations

import json
import re
import socket
import sys
from typing import Any

import pytest

import jobs
from jobs.models import Job, JobEvent, WorkerHeartbeat
from tests import kinds_operators  # noqa: F401  (registers test.ops.*)
from tests.harness import Harness, Proc, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NODE = f"ident@{socket.gethostname()}"  # what `--hostname=ident@%h` makes of it


def start_named_worker(harness: Harness, **env: str) -> Proc:
    """A worker named only by Celery's --hostname (harness.start_worker sets JOBS_WORKER_NAME)."""
    argv = [
        sys.executable, "-m", "celery", "-A", "jobsite", "worker", "--loglevel=INFO",
        "--queues=jobs", "--concurrency=2", "--pool=prefork", "--hostname=ident@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    proc = harness.spawn("ident", argv, harness.base_env(
        JOBS_HANDLER_MODULES="tests.kinds_operators", **env
    ))  # fmt: skip
    wait_until(lambda: "ready." in proc.log() or not proc.alive(), timeout=60, what="the worker")
    assert proc.alive(), proc.log()[-3000:]
    return proc


def run_chatty(owner: Any) -> Job:
    job = jobs.submit(kind="test.ops.chatty", input={"secret": "private-marker-6630"}, owner=owner)
    wait_until(lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=60, what="the job")
    return Job.objects.get(pk=job.pk)


def test_lease_owner_ops_and_logs_name_the_celery_node__no_worker_name_set(
    harness: Harness, user: Any
) -> None:
    worker = start_named_worker(harness)
    job = run_chatty(user)

    claim = JobEvent.objects.get(job=job, to_state="leased")
    node, nonce, pid = claim.worker.rsplit(":", 2)
    assert node == NODE and len(nonce) == 6
    assert int(pid) in worker.children()  # the pool process that ran it, not the main one
    assert job.lease_owner == claim.worker
    wait_until(
        lambda: WorkerHeartbeat.objects.filter(name=NODE).exists(),
        timeout=30,
        what="the worker's sighting for /ops/ under the same name",
    )
    wait_until(lambda: "job succeeded" in worker.log(), timeout=30, what="the success line")
    assert f"worker={claim.worker}" in worker.log()


def test_text_lines_of_a_job__carry_job_kind_attempt_generation(
    harness: Harness, user: Any
) -> None:
    worker = start_named_worker(harness)
    job = run_chatty(user)
    wait_until(lambda: "job succeeded" in worker.log(), timeout=30, what="the success line")

    fields = (
        rf"job={job.pk} kind=test\.ops\.chatty attempt=1 generation=1 "
        rf"worker={re.escape(NODE)}:[0-9a-f]{{6}}:\d+$"
    )
    lines = worker.log().splitlines()
    # The runtime's line, and the handler's own line that passed no `extra` at all.
    assert any(re.search(rf"INFO jobs\.runtime job succeeded {fields}", ln) for ln in lines)
    assert any(
        re.search(rf"INFO tests\.kinds_operators handler at work {fields}", ln) for ln in lines
    ), worker.log()[-3000:]
    assert "private-marker-6630" not in worker.log()


def test_json_lines_of_a_job__carry_the_fields_as_keys(harness: Harness, user: Any) -> None:
    worker = start_named_worker(harness, LOG_FORMAT="json")
    job = run_chatty(user)
    wait_until(lambda: "job succeeded" in worker.log(), timeout=30, what="the success line")

    records = [json.loads(ln) for ln in worker.log().splitlines() if ln.startswith("{")]
    ours = [r for r in records if r.get("message") in {"handler at work", "job succeeded"}]
    assert len(ours) == 2, worker.log()[-3000:]
    for record in ours:
        assert (record["job_id"], record["kind"], record["attempt"], record["generation"]) == (
            str(job.pk),
            "test.ops.chatty",
            1,
            1,
        )
        assert record["worker"].startswith(f"{NODE}:")
        assert "job_fields" not in record  # the text form is for text only
    assert "private-marker-6630" not in worker.log()
