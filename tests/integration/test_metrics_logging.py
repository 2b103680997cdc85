"""Structured logs from a real worker: one JSON object per line, job keys, no payloads."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import jobs
from jobs.logging import REDACTED, RedactPayloadFilter
from jobs.models import Job
from tests.harness import Harness, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

JOB_KEYS = {"job_id", "kind", "attempt", "generation", "worker"}


def _json_lines(text: str) -> list[dict[str, Any]]:
    lines = []
    for line in text.splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def test_worker_logs_json_with_job_keys__never_input_or_result(harness: Harness, user: Any) -> None:
    worker = harness.start_worker("wjson", LOG_FORMAT="json")
    job = jobs.submit(kind="noop", input={"secret": "private-marker-4410"}, owner=user)
    wait_until(
        lambda: Job.objects.get(pk=job.pk).state == "succeeded", timeout=60, what="job to succeed"
    )
    wait_until(lambda: "job succeeded" in worker.log(), timeout=30, what="the success log line")

    records = _json_lines(worker.log())
    succeeded = [r for r in records if r.get("message") == "job succeeded"]
    assert len(succeeded) == 1, worker.log()[-2000:]
    line = succeeded[0]
    assert line.keys() >= JOB_KEYS
    assert (line["job_id"], line["kind"], line["attempt"], line["generation"]) == (
        str(job.pk),
        "noop",
        1,
        1,
    )
    assert line["worker"].startswith("wjson:")
    assert {"levelname", "name", "asctime"} <= line.keys()
    assert "private-marker-4410" not in worker.log()
    assert not any("input" in r or "result" in r for r in records)


def test_redact_filter_blanks_payload_fields__keeps_the_line() -> None:
    record = logging.LogRecord("jobs", logging.INFO, __file__, 1, "done", None, None)
    record.input = {"secret": 1}
    record.job_id = "abc"
    assert RedactPayloadFilter().filter(record) is True
    assert record.input == REDACTED and record.job_id == "abc"  # type: ignore[attr-defined]
