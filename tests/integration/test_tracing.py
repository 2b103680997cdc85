"""OpenTelemetry: one trace per job (jobs.tracing, outbox.tracing), in process and across a
real relay and worker, across a retry, and from a batch message to each job's trace.

The test process's spans go to the SDK's InMemorySpanExporter; the relay's and the worker's
to a file (tests/tracing_export.py). Assertions are on real ids: trace ids and parent span ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jobs
from jobs import runtime, tracing
from jobs.models import Job
from jobs.runtime import Outcome
from outbox.models import OutboxEntry
from tests.harness import Harness, wait_until
from tests.tracing_export import SPANS_FILE_ENV, read_spans, span_record

pytestmark = pytest.mark.django_db(transaction=True)

MODULES = "tests.tracing_export"


class Spans:
    """The test process's tracer provider and what it exported."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def records(self) -> list[dict[str, Any]]:
        return [span_record(span) for span in self.exporter.get_finished_spans()]


@pytest.fixture
def spans(settings: Any) -> Iterator[Spans]:
    """Tracing on in this process (the library's own provider hook, not the global one), and
    rows left in the outbox for the relay (no fast path)."""
    settings.OUTBOX_FAST_PATH = False
    spans = Spans()
    tracing.use(spans.provider)
    yield spans
    tracing.use(None)
    spans.provider.shutdown()


def _one(records: list[dict[str, Any]], name: str, **attributes: Any) -> dict[str, Any]:
    found = [
        r
        for r in records
        if r["name"] == name and all(r["attributes"].get(k) == v for k, v in attributes.items())
    ]
    assert len(found) == 1, f"{name} {attributes}: {len(found)} spans in {records}"
    return found[0]


def _ids(traceparent: str) -> tuple[str, str]:
    """(trace id, span id) of a W3C traceparent."""
    _version, trace_id, span_id, _flags = traceparent.split("-")
    return trace_id, span_id


def _root(job: Job) -> tuple[str, str]:
    """(trace id, span id) of the job's root span, from the context stored with it."""
    stored = Job.objects.get(pk=job.pk).trace_context
    assert stored is not None
    return _ids(stored["traceparent"])


def _submit_in_request(spans: Spans, user: Any, kind: str, **input: Any) -> tuple[Job, Any]:
    with spans.provider.get_tracer("test").start_as_current_span("request") as request:
        job = jobs.submit(kind=kind, input=input, owner=user)
    return job, request.get_span_context()


def _row_kwargs(job: Job) -> dict[str, Any]:
    row = OutboxEntry.objects.filter(job_id=job.pk).order_by("-id").first()
    assert row is not None
    return dict(row.kwargs)


def test_no_sdk__no_trace_context_no_hints_no_spans(user: Any, settings: Any) -> None:
    settings.OUTBOX_FAST_PATH = False
    tracing.use(None)
    assert not tracing.enabled()
    job = jobs.submit(kind="trace.alone", input={"n": 1}, owner=user)
    assert Job.objects.get(pk=job.pk).trace_context is None
    assert "traceparent" not in _row_kwargs(job)
    assert runtime.execute(job.pk).outcome is Outcome.SUCCEEDED


def test_submit_in_a_span__root_is_its_child_and_delivery_spans_join(
    spans: Spans, user: Any
) -> None:
    job, request = _submit_in_request(spans, user, "trace.alone", n=1)
    stored = Job.objects.get(pk=job.pk).trace_context
    assert stored is not None
    trace_id, root_id = _ids(stored["traceparent"])
    submit = _one(spans.records(), "jobs.submit", **{"job.id": str(job.pk)})
    assert (submit["trace_id"], submit["span_id"]) == (trace_id, root_id)
    assert submit["trace_id"] == f"{request.trace_id:032x}"
    assert submit["parent_id"] == f"{request.span_id:016x}"
    assert submit["attributes"] == {"job.id": str(job.pk), "job.kind": "trace.alone"}
    hints = _row_kwargs(job)
    assert hints["traceparent"] == stored["traceparent"]

    report = runtime.execute(job.pk, kind=hints["kind"], kind_version=1, hints=hints)

    assert report.outcome is Outcome.SUCCEEDED
    records = spans.records()
    claim = _one(records, "jobs.claim")
    run = _one(records, "jobs.run")
    complete = _one(records, "jobs.complete")
    assert {claim["trace_id"], run["trace_id"], complete["trace_id"]} == {trace_id}
    assert claim["parent_id"] == root_id
    assert run["parent_id"] == root_id
    assert complete["parent_id"] == run["span_id"]
    assert run["attributes"] == {
        "job.id": str(job.pk),
        "job.kind": "trace.alone",
        "job.attempt": 1,
        "job.generation": 1,
        "job.outcome": "succeeded",
    }
    assert claim["attributes"]["jobs.claim.status"] == "claimed"
    assert all("n" not in r["attributes"] and "input" not in str(r) for r in records)


def test_a_django_request__the_jobs_root_span_is_a_child_of_the_request_span(
    spans: Spans, alice: Any
) -> None:
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    from tests.integration.api_helpers import token_client

    instrumentor = DjangoInstrumentor()
    instrumentor.instrument(tracer_provider=spans.provider)
    try:
        response = token_client(alice).post(
            "/api/jobs/",
            data=json.dumps({"kind": "trace.alone", "input": {"n": 6}}),
            content_type="application/json",
        )
    finally:
        instrumentor.uninstrument()
    assert response.status_code == 202, response.content
    job_id = response.json()["id"]
    records = spans.records()
    submit = _one(records, "jobs.submit", **{"job.id": job_id})
    [request] = [r for r in records if r["span_id"] == submit["parent_id"]]
    assert request["trace_id"] == submit["trace_id"]
    method = request["attributes"].get("http.method") or request["attributes"].get(
        "http.request.method"
    )
    assert method == "POST"  # the instrumentation's server span (old or new semconv names)
    stored = Job.objects.get(pk=job_id).trace_context
    assert stored is not None
    assert _ids(stored["traceparent"]) == (submit["trace_id"], submit["span_id"])


def test_a_delivery_without_hints__takes_the_context_stored_with_the_job(
    spans: Spans, user: Any
) -> None:
    job, _ = _submit_in_request(spans, user, "trace.alone", n=2)
    trace_id, root_id = _root(job)

    assert runtime.execute(job.pk).outcome is Outcome.SUCCEEDED  # a message with no hints

    run = _one(spans.records(), "jobs.run")
    assert (run["trace_id"], run["parent_id"]) == (trace_id, root_id)


def test_submit_many_in_a_span__each_job_its_own_trace_under_the_request(
    spans: Spans, user: Any
) -> None:
    requests = [{"kind": "trace.batch", "input": {"n": n}, "owner": user} for n in range(3)]
    with spans.provider.get_tracer("test").start_as_current_span("request") as request:
        submitted = jobs.submit_many(requests)

    records = spans.records()
    trace_id = f"{request.get_span_context().trace_id:032x}"
    for job in submitted:
        stored = Job.objects.get(pk=job.pk).trace_context
        assert stored is not None
        assert stored == job.trace_context
        submit = _one(records, "jobs.submit", **{"job.id": str(job.pk)})
        assert (submit["trace_id"], submit["span_id"]) == _ids(stored["traceparent"])
        assert submit["trace_id"] == trace_id
        assert submit["parent_id"] == f"{request.get_span_context().span_id:016x}"
        assert _row_kwargs(job)["traceparent"] == stored["traceparent"]


def test_a_job_accepted_with_tracing_off__its_delivery_is_one_trace_of_its_own(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    job = jobs.submit(kind="trace.alone", input={"n": 5}, owner=user)  # no SDK yet
    spans = Spans()
    tracing.use(spans.provider)
    try:
        assert runtime.execute(job.pk).outcome is Outcome.SUCCEEDED
    finally:
        tracing.use(None)
    records = spans.records()
    deliver = _one(records, "jobs.deliver", **{"job.id": str(job.pk)})
    assert deliver["parent_id"] is None
    for name in ("jobs.claim", "jobs.run"):
        span = _one(records, name)
        assert (span["trace_id"], span["parent_id"]) == (deliver["trace_id"], deliver["span_id"])


def _worker_and_relay(harness: Harness, spans_file: Path, **env: str) -> None:
    extra = {"JOBS_HANDLER_MODULES": MODULES, SPANS_FILE_ENV: str(spans_file), **env}
    harness.start_worker("w-trace", env=extra)
    harness.start_relay(env=extra)


def _done(job: Job) -> bool:
    return Job.objects.get(pk=job.pk).state == "succeeded"


def _worker_spans(path: Path, name: str, count: int) -> list[dict[str, Any]]:
    wait_until(
        lambda: len([s for s in read_spans(path) if s["name"] == name]) >= count,
        timeout=60,
        what=f"{count} {name} span(s) in the processes' file",
    )
    return read_spans(path)


def test_real_relay_and_worker__one_job_is_one_trace_with_the_right_parents(
    spans: Spans, user: Any, harness: Harness, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    job, request = _submit_in_request(spans, user, "trace.alone", n=3)
    _worker_and_relay(harness, spans_file)
    wait_until(lambda: _done(job), timeout=60, what="the job to succeed on the real worker")
    records = spans.records() + _worker_spans(spans_file, "jobs.run", 1)

    submit = _one(records, "jobs.submit")
    publish = _one(records, "outbox.publish")
    claim = _one(records, "jobs.claim")
    run = _one(records, "jobs.run")
    complete = _one(records, "jobs.complete")
    trace_id = f"{request.trace_id:032x}"
    assert {s["trace_id"] for s in (submit, publish, claim, run, complete)} == {trace_id}
    assert submit["parent_id"] == f"{request.span_id:016x}"
    assert publish["parent_id"] == submit["span_id"]
    assert claim["parent_id"] == submit["span_id"]
    assert run["parent_id"] == submit["span_id"]
    assert complete["parent_id"] == run["span_id"]
    # Three processes: the submitter, the relay, the worker's pool process.
    assert submit["pid"] != publish["pid"] != run["pid"]
    assert run["attributes"]["job.outcome"] == "succeeded"
    assert complete["attributes"]["job.outcome"] == "succeeded"


def test_a_retry__the_second_attempt_is_in_the_same_trace(
    spans: Spans, user: Any, harness: Harness, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    job, request = _submit_in_request(spans, user, "trace.alone", n=4, fail_times=1)
    _worker_and_relay(harness, spans_file)
    wait_until(lambda: _done(job), timeout=60, what="the job to succeed on its second attempt")
    records = spans.records() + _worker_spans(spans_file, "jobs.run", 2)

    submit = _one(records, "jobs.submit")
    first = _one(records, "jobs.run", **{"job.attempt": 1})
    second = _one(records, "jobs.run", **{"job.attempt": 2})
    trace_id = f"{request.trace_id:032x}"
    assert first["trace_id"] == second["trace_id"] == trace_id
    assert first["parent_id"] == second["parent_id"] == submit["span_id"]
    assert first["attributes"]["job.outcome"] == "retry_scheduled"
    assert second["attributes"]["job.outcome"] == "succeeded"
    assert (first["attributes"]["job.generation"], second["attributes"]["job.generation"]) == (
        1,
        2,
    )
    # The retry's message (sent by the worker, from the lease) carries the job's context:
    # both publishes are children of the root too.
    publishes = [r for r in records if r["name"] == "outbox.publish"]
    assert len(publishes) == 2
    assert {(p["trace_id"], p["parent_id"]) for p in publishes} == {(trace_id, submit["span_id"])}


def test_a_batch_message__links_to_each_job_and_each_run_is_in_its_own_trace(
    spans: Spans, user: Any, harness: Harness, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    submitted = [_submit_in_request(spans, user, "trace.batch", n=n)[0] for n in range(3)]
    roots = {str(job.pk): _root(job) for job in submitted}
    assert len({trace_id for trace_id, _ in roots.values()}) == 3  # a trace per job
    _worker_and_relay(harness, spans_file)
    wait_until(lambda: all(_done(job) for job in submitted), timeout=60, what="the batch's jobs")
    records = _worker_spans(spans_file, "jobs.run", 3)

    publish = _one(records, "outbox.publish")
    batch = _one(records, "jobs.execute_many")
    linked = sorted(tuple(link) for link in publish["links"])
    assert linked == sorted(roots.values())
    assert sorted(tuple(link) for link in batch["links"]) == sorted(roots.values())
    assert (batch["trace_id"], batch["parent_id"]) == (publish["trace_id"], publish["span_id"])
    for job_id, (trace_id, root_id) in roots.items():
        run = _one(records, "jobs.run", **{"job.id": job_id})
        assert (run["trace_id"], run["parent_id"]) == (trace_id, root_id)
        assert run["links"] == [[batch["trace_id"], batch["span_id"]]]
        assert run["attributes"]["job.outcome"] == "succeeded"
