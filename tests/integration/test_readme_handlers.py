"""docs/handlers.md's complete example runs as written: one result, one artifact, one notice."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobs
from jobs import registry
from jobs.exceptions import ValidationFailed
from jobs.models import EffectLedgerEntry, Job, QuarantineRecord
from jobs.runtime import Outcome
from tests.harness import ROOT, Harness

pytestmark = pytest.mark.django_db(transaction=True)

HANDLERS_DOC = ROOT / "docs" / "handlers.md"
EXAMPLE = re.compile(r"^```python example\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def example_source() -> str:
    found = EXAMPLE.findall(HANDLERS_DOC.read_text())
    assert len(found) == 1, "docs/handlers.md must hold exactly one `python example` block"
    return str(found[0])


@pytest.fixture
def receipt_kind() -> Iterator[None]:
    exec(compile(example_source(), str(HANDLERS_DOC), "exec"), {"__name__": "myapp.kinds"})
    yield
    registry.unregister("example.receipt")


@pytest.fixture
def provider(harness: Harness, settings: Any) -> Harness:
    harness.start_provider()
    settings.NOTIFY_PROVIDER_URL = harness.provider_url("/notify")
    return harness


ORDER = {"order": 84, "lines": ["1 x report"], "email": "reviewer47@example.com"}


def test_example_commits_one_result_one_artifact_one_notice__delivered_twice(
    receipt_kind: None, provider: Harness, user: Any, tenant: Any, settings: Any
) -> None:
    job = jobs.submit(kind="example.receipt", input=ORDER, owner=user, tenant=tenant)
    assert jobs.execute(job.pk).outcome is Outcome.SUCCEEDED
    assert jobs.execute(job.pk).outcome is Outcome.DUPLICATE  # a redelivery is absorbed
    done = Job.objects.get(pk=job.pk)
    assert done.state == "succeeded" and done.attempt == 1 and done.result is not None
    stored = Path(settings.MEDIA_ROOT) / done.result["document"]
    assert stored.read_bytes() == b"Receipt for order 84\n1 x report"
    assert [p.name for p in stored.parent.iterdir()] == ["receipt.txt"]
    entry = EffectLedgerEntry.objects.get(job_id=job.pk, name="receipt_email")
    assert entry.state == "applied" and entry.calls == 1 and entry.outcome is not None
    assert done.result["notice_id"] == entry.outcome["notice_id"]
    assert provider.provider_stats()["requests_by_key"] == {entry.idempotency_key: 1}


def test_example_quarantined_at_once__permanent_error(
    receipt_kind: None, provider: Harness, user: Any, tenant: Any
) -> None:
    job = jobs.submit(
        kind="example.receipt", input={**ORDER, "email": "nobody"}, owner=user, tenant=tenant
    )
    assert jobs.execute(job.pk).outcome is Outcome.QUARANTINED
    record = QuarantineRecord.objects.get(job_id=job.pk)
    assert (record.category, record.attempts, record.responsible) == (
        "permanent",
        1,
        "billing-team",
    )
    assert provider.provider_stats()["total_requests"] == 0


def test_example_refused_at_submission__input_off_schema(
    receipt_kind: None, user: Any, tenant: Any
) -> None:
    with pytest.raises(ValidationFailed):
        jobs.submit(kind="example.receipt", input={"order": "84"}, owner=user, tenant=tenant)
    assert not Job.objects.filter(kind="example.receipt").exists()
