"""The document-ingestion pipeline (documents.ingest: ingest -> N index_chunk -> one summary
after all of them) with its real worker SIGKILLed in the middle of each step, and once
killed between an ingest's handler and its completion (failpoint): exactly one summary,
exactly N chunk indexes, no duplicate effect, and no follow-up of an attempt that did not
commit (jobs.links)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

import jobs
from documents.models import DocumentChunkIndex, DocumentRevision, DocumentSummary
from documents.services import document_create
from jobs.models import EffectLedgerEntry, Job
from jobs.reaper import jobs_reap
from tests.harness import Harness, Proc, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

N = 6
CHUNK_WORDS = 10
WORK = 1.5  # seconds each step works: the window the test kills in
TEXT = " ".join(f"word{i % 7} term{i % 3}" for i in range(N * CHUNK_WORDS // 2))


def _ingest(user: Any, *, work: float = WORK) -> Job:
    document = document_create(owner=user, title="ingested")
    DocumentRevision.objects.create(document=document, version=1, text=TEXT)
    document.current_version = 1
    document.save(update_fields=["current_version"])
    return jobs.submit(
        kind="document.ingest",
        input={"document_id": document.pk, "chunk_words": CHUNK_WORDS, "work_seconds": work},
        owner=user,
    )


def _running(kind: str) -> bool:
    jobs_reap()  # the beat's reaper: an expired lease back to retry_wait, with its message
    return Job.objects.filter(kind=kind, state="leased", started_at__isnull=False).exists()


def _kill_mid(worker: Proc, kind: str) -> None:
    """SIGKILL the pool child while a job of `kind` runs (its handler works WORK seconds)."""
    child = worker.pool_child()
    wait_until(lambda: _running(kind), timeout=120, interval=0.02, what=f"a {kind} to run")
    os.kill(child, signal.SIGKILL)
    wait_until(lambda: child not in worker.children(), timeout=30, what="the pool child to die")


def _summary_done() -> bool:
    jobs_reap()
    return Job.objects.filter(kind="document.summarize", state="succeeded").exists()


def _assert_once_each(ingest: Job) -> None:
    """One attempt's follow-ups, each effect once, one summary over all N chunks."""
    chunks = Job.objects.filter(kind="document.index_chunk")
    assert chunks.count() == N and set(chunks.values_list("parent_id", flat=True)) == {ingest.pk}
    assert set(chunks.values_list("state", flat=True)) == {"succeeded"}
    [summary] = Job.objects.filter(kind="document.summarize")
    assert summary.parent_id == ingest.pk
    assert isinstance(summary.result, dict)
    assert (summary.result["chunks"], summary.result["indexed"]) == (N, N)
    assert DocumentChunkIndex.objects.count() == N
    assert sorted(DocumentChunkIndex.objects.values_list("chunk", flat=True)) == list(range(N))
    [row] = DocumentSummary.objects.all()
    assert (row.chunks, row.indexed, row.job_id) == (N, N, summary.pk)
    applied = EffectLedgerEntry.objects.filter(state="applied", name__in=["chunk_index", "summary"])
    assert applied.count() == N + 1


def test_ingest__worker_killed_mid_ingest_mid_index_mid_summary__everything_once(
    harness: Harness, user: Any
) -> None:
    ingest = _ingest(user)
    harness.start_relay()
    worker = harness.start_worker("w-ingest")

    _kill_mid(worker, "document.ingest")
    # The killed attempt had not committed: none of the follow-ups it was asking for exists.
    assert not Job.objects.filter(parent=ingest).exists()
    _kill_mid(worker, "document.index_chunk")
    assert DocumentSummary.objects.count() == 0
    summary = Job.objects.get(kind="document.summarize")
    assert summary.state == "waiting"
    _kill_mid(worker, "document.summarize")
    wait_until(_summary_done, timeout=180, interval=0.2, what="the summary to succeed")

    assert Job.objects.get(pk=ingest.pk).state == "succeeded"
    _assert_once_each(ingest)
    assert Job.objects.get(pk=summary.pk).attempt >= 2  # its first attempt was killed


def test_ingest__killed_after_its_handler_before_its_completion__no_follow_up_then_once(
    harness: Harness, user: Any
) -> None:
    """The ingest's handler returned (N + 1 follow-ups asked for), then the process exits
    before the completion transaction: nothing of them was written; the next worker's attempt
    writes them once."""
    ingest = _ingest(user, work=0)
    harness.start_relay()
    doomed = harness.start_worker(
        "w-doomed", JOBS_FAILPOINTS="worker.after_effect_before_complete=exit"
    )
    wait_until(
        lambda: (
            Job.objects.filter(pk=ingest.pk, generation__gte=1).exists() and not doomed.children()
        ),
        timeout=60,
        what="the doomed worker's attempt to die before its completion",
    )
    doomed.stop()
    assert Job.objects.get(pk=ingest.pk).state == "leased"
    assert not Job.objects.filter(parent=ingest).exists()

    harness.start_worker("w-next")
    wait_until(_summary_done, timeout=180, interval=0.2, what="the summary to succeed")

    _assert_once_each(ingest)
