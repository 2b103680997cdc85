"""`jobs.submit_many`: many jobs in one transaction, all or none, published after the commit
in batch messages (read back from the suite's private Redis)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import jobs
import tests.kinds_batch  # noqa: F401  (registers the batch kinds in this process too)
from jobs import bulk
from jobs.exceptions import IdempotencyConflict, InputTooLarge, UnknownKind, ValidationFailed
from jobs.models import Job, JobEvent, StoredObject, Tenant
from outbox.conf import outbox_settings
from outbox.models import OutboxEntry
from outbox.services import outbox_after_commit_many
from tests.harness import Harness, wait_until
from tests.integration.test_relay_batching import broker_messages, job_ids_of
from tests.kinds_batch import calls

pytestmark = pytest.mark.django_db(transaction=True)


def _plain(user: Any, n: int, kind: str = "batch.echo") -> dict[str, Any]:
    return {"kind": kind, "input": {"n": n}, "owner": user}


def _nothing_written() -> bool:
    return not (Job.objects.exists() or JobEvent.objects.exists() or OutboxEntry.objects.exists())


def _unmarked() -> int:
    return OutboxEntry.objects.filter(published_at__isnull=True).count()


def _inserts(captured: CaptureQueriesContext) -> Counter[str]:
    """INSERT statements sent, by table."""
    tables: Counter[str] = Counter()
    for query in captured.captured_queries:
        sql = query["sql"]
        if sql.startswith("INSERT INTO "):
            tables[sql.split()[2].strip('"')] += 1
    return tables


def test_1000_plain_jobs__one_insert_per_table__published_in_batch_messages_after_commit(
    user: Any, broker: redis.Redis
) -> None:
    requests = [_plain(user, n) for n in range(1000)]

    with CaptureQueriesContext(connection) as captured:
        submitted = jobs.submit_many(requests)

    assert _inserts(captured) == {"jobs_job": 1, "jobs_jobevent": 1, "outbox_outboxentry": 1}
    others = [
        q["sql"][:80]
        for q in captured.captured_queries
        if not q["sql"].startswith("INSERT INTO ") and q["sql"] not in ("BEGIN", "COMMIT")
    ]
    assert others == []  # nothing sent per job
    assert [job.input for job in submitted] == [{"n": n} for n in range(1000)]
    assert {job.replayed for job in submitted} == {False}
    ids = {str(job.pk) for job in submitted}
    assert Job.objects.filter(state="queued").count() == 1000
    assert JobEvent.objects.filter(to_state="queued", reason="accepted").count() == 1000
    rows = OutboxEntry.objects.filter(task_name="jobs.execute")
    assert {str(job_id) for job_id in rows.values_list("job_id", flat=True)} == ids
    assert rows.count() == 1000
    # Published from memory right after the commit, before submit_many returned.
    messages = broker_messages(broker)
    assert [(task, len(job_ids_of((task, kw)))) for task, kw in messages] == [
        ("jobs.execute_many", 20)
    ] * 50
    carried = [job_id for message in messages for job_id in job_ids_of(message)]
    assert len(carried) == 1000 and set(carried) == ids
    wait_until(lambda: _unmarked() == 0, timeout=30, what="every row to be marked published")


def test_inside_a_callers_transaction__published_only_once_it_commits(
    user: Any, broker: redis.Redis
) -> None:
    with transaction.atomic():
        submitted = jobs.submit_many([_plain(user, n) for n in range(40)])
        assert Job.objects.count() == 40
        assert broker_messages(broker) == []  # not before the caller's commit

    messages = broker_messages(broker)
    assert [task for task, _ in messages] == ["jobs.execute_many"] * 2
    assert sorted(j for m in messages for j in job_ids_of(m)) == sorted(
        str(job.pk) for job in submitted
    )


def test_inside_a_callers_transaction_that_rolls_back__nothing_written_nothing_published(
    user: Any, broker: redis.Redis
) -> None:
    class Abort(Exception):
        pass

    requests = [_plain(user, n) for n in range(30)]
    requests.append({**_plain(user, 99), "idempotency_key": "k-99"})  # the keyed path too
    with pytest.raises(Abort), transaction.atomic():
        jobs.submit_many(requests)
        raise Abort

    assert _nothing_written()
    assert broker_messages(broker) == []


BAD_REQUESTS: dict[str, tuple[dict[str, Any], type[Exception]]] = {
    "unknown kind": ({"kind": "no.such.kind", "input": {"n": 1}}, UnknownKind),
    "schema violation": ({"kind": "batch.strict", "input": {"n": "one"}}, ValidationFailed),
    "too large": ({"kind": "batch.echo", "input": {"pad": "x" * 70_000}}, InputTooLarge),
    "unknown field": ({"kind": "batch.echo", "input": {}, "urgency": 9}, TypeError),
}


# In the test's own transaction (quicker): submit_many's is a savepoint, rolled back the same
# way; that nothing is published after a rollback is shown by the caller's-transaction test.
@pytest.mark.django_db
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "idempotency-keyed"])
@pytest.mark.parametrize("position", [0, 5, 10], ids=["first", "middle", "last"])
@pytest.mark.parametrize("bad", list(BAD_REQUESTS), ids=list(BAD_REQUESTS))
def test_an_invalid_request_anywhere__raises_and_writes_nothing(
    user: Any, bad: str, position: int, keyed: bool
) -> None:
    request, error = BAD_REQUESTS[bad]
    request = {**request, "owner": user}
    if keyed:
        request["idempotency_key"] = f"bad-{position}"
    requests = [_plain(user, n) for n in range(10)]
    requests.insert(position, request)

    with CaptureQueriesContext(connection) as captured, pytest.raises(error):
        jobs.submit_many(requests)

    assert _nothing_written()
    if not keyed:
        assert _inserts(captured) == {}  # checked before anything was sent


def test_mixed_requests__keyed_ones_through_job_submit__returned_in_request_order(
    user: Any, broker: redis.Redis
) -> None:
    requests = [
        _plain(user, 0),
        {**_plain(user, 1), "idempotency_key": "k-1"},
        _plain(user, 2),
        {**_plain(user, 3), "serialization_key": "doc:7"},
        {**_plain(user, 4), "serialization_key": "doc:7"},
        {**_plain(user, 5), "business_key": "report-5"},
        _plain(user, 6, kind="batch.capped"),
        _plain(user, 7),
    ]

    submitted = jobs.submit_many(requests)

    assert [job.input for job in submitted] == [{"n": n} for n in range(8)]
    assert [job.kind for job in submitted] == [r["kind"] for r in requests]
    assert submitted[1].idempotency_key == "k-1"
    assert submitted[5].business_key == "report-5"
    head, behind = submitted[3], submitted[4]
    # The serialization key's rules held: only the head of the key got a message.
    assert OutboxEntry.objects.filter(job_id=head.pk).exists()
    assert not OutboxEntry.objects.filter(job_id=behind.pk).exists()
    messaged = [job for job in submitted if job is not behind]
    assert OutboxEntry.objects.count() == len(messaged)
    plain = [submitted[n] for n in (0, 2, 7)]
    messages = broker_messages(broker)
    batches = [job_ids_of(m) for m in messages if m[0] == "jobs.execute_many"]
    assert batches == [[str(job.pk) for job in plain]]  # the bulk rows, packed
    assert sorted(j for m in messages for j in job_ids_of(m)) == sorted(
        str(job.pk) for job in messaged
    )

    again = jobs.submit_many([{**_plain(user, 1), "idempotency_key": "k-1"}, _plain(user, 8)])

    assert again[0].pk == submitted[1].pk and again[0].replayed
    assert not again[1].replayed
    assert Job.objects.count() == 9


def test_a_plain_request_due_later__left_to_the_relay__the_others_published_now(
    user: Any, broker: redis.Redis
) -> None:
    later = timezone.now() + timedelta(hours=1)
    requests = [_plain(user, n) for n in range(3)]
    requests.insert(1, {**_plain(user, 9), "run_after": later})

    submitted = jobs.submit_many(requests)

    waiting = OutboxEntry.objects.get(job_id=submitted[1].pk)
    assert waiting.available_at == later and waiting.reserved_until is None
    assert waiting.published_at is None
    now = [str(submitted[n].pk) for n in (0, 2, 3)]
    assert [job_ids_of(m) for m in broker_messages(broker)] == [now]


def test_a_keyed_request_in_conflict__raises_and_the_whole_call_writes_nothing(
    user: Any, broker: redis.Redis
) -> None:
    jobs.submit(kind="batch.echo", input={"n": 1}, owner=user, idempotency_key="k-1")
    before = (Job.objects.count(), JobEvent.objects.count(), OutboxEntry.objects.count())
    broker.flushdb()
    requests = [_plain(user, n) for n in range(5)]
    requests.append({**_plain(user, 2), "idempotency_key": "k-1"})  # same key, other body

    with pytest.raises(IdempotencyConflict):
        jobs.submit_many(requests)

    assert (Job.objects.count(), JobEvent.objects.count(), OutboxEntry.objects.count()) == before
    assert broker_messages(broker) == []


def test_a_real_worker_drains_200_submit_many_jobs__each_exactly_once(
    harness: Harness, user: Any, tmp_path: Path
) -> None:
    calls_path = str(tmp_path / "calls.txt")
    worker = harness.start_worker(
        "wm",
        concurrency=2,
        JOBS_HANDLER_MODULES="tests.kinds_batch",
        JOBS_TEST_CALLS_FILE=calls_path,
    )

    submitted = jobs.submit_many([_plain(user, n) for n in range(200)])

    wait_until(
        lambda: Job.objects.filter(state="succeeded").count() == 200,
        timeout=90,
        what="200 jobs to succeed",
    )
    assert "jobs.execute_many" in worker.log()
    runs = Counter(job_id for job_id, _, _ in calls(calls_path))
    assert runs == Counter({str(job.pk): 1 for job in submitted})
    for n, job in enumerate(submitted):
        done = Job.objects.get(pk=job.pk)
        assert (done.attempt, done.generation, done.result) == (1, 1, {"n": n, "attempt": 1})
    claims = JobEvent.objects.filter(to_state="leased").values_list("reason", flat=True)
    assert Counter(claims) == {"claimed in a batch": 200}
    assert JobEvent.objects.filter(to_state="succeeded").count() == 200
    wait_until(lambda: _unmarked() == 0, timeout=30, what="every row to be marked published")


# --- the column-wise write (jobs.bulk) against job_submit's rows -------------------------------

JSONB_OID = 3802  # Django's connection reads jsonb as text: parsed here

# Written per row and compared separately (ids, and the ids that reference them).
_IDS = {
    "jobs_job": {"id"},
    "jobs_jobevent": {"id", "job_id"},
    "outbox_outboxentry": {"id", "job_id"},
}


def _rows(table: str, column: str, value: Any) -> list[dict[str, Any]]:
    """Every column of the rows of `table` whose `column` is `value`, read with SQL."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} WHERE {column} = %s", [value])
        columns = [(c.name, c.type_code == JSONB_OID) for c in cursor.description]
        return [
            {
                name: json.loads(value) if is_json and value is not None else value
                for (name, is_json), value in zip(columns, row, strict=True)
            }
            for row in cursor.fetchall()
        ]


def _written(job_id: Any) -> dict[str, dict[str, Any]]:
    """The job's one row of each table (every column), its outbox row's job id checked."""
    rows = {
        "jobs_job": _rows("jobs_job", "id", job_id),
        "jobs_jobevent": _rows("jobs_jobevent", "job_id", job_id),
        "outbox_outboxentry": _rows("outbox_outboxentry", "job_id", job_id),
    }
    assert {table: len(found) for table, found in rows.items()} == dict.fromkeys(rows, 1)
    written = {table: found[0] for table, found in rows.items()}
    message = written["outbox_outboxentry"]
    assert message["kwargs"]["job_id"] == str(job_id)
    message["kwargs"] = {**message["kwargs"], "job_id": "(the job's id)"}
    return written


def _differences(a: dict[str, Any], b: dict[str, Any], ignore: set[str]) -> dict[str, Any]:
    """Columns whose values differ; times (or None) differ by a second or more."""
    assert a.keys() == b.keys()
    out: dict[str, Any] = {}
    for name in a.keys() - ignore:
        x, y = a[name], b[name]
        if isinstance(x, datetime) and isinstance(y, datetime):
            if abs(x - y) >= timedelta(seconds=1):
                out[name] = (x, y)
        elif x != y:
            out[name] = (x, y)
    return out


def _request_of(case: str, user: Any, tenant: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"kind": "batch.echo", "input": {"n": 1, "text": 'é"\\'}}
    if case == "deferred":
        request["run_after"] = timezone.now() + timedelta(hours=1)
    elif case == "run_after passed":
        request["run_after"] = timezone.now() - timedelta(hours=1)
    elif case == "tenant":
        request["tenant"] = tenant
    elif case == "input_ref":
        request["input_ref"] = StoredObject.objects.create(
            owner=user, tenant=tenant, storage_name="in.csv", size=3, sha256="0" * 64
        )
    elif case == "kind with a schema and a queue":
        request = {"kind": "batch.elsewhere", "input": {"n": 2}, "input_version": 3}
    elif case == "replay of":
        request["replay_of"] = jobs.submit(kind="batch.echo", input={"n": 0}, owner=user)
    return {**request, "owner": user}


CASES = [
    "plain",
    "deferred",
    "run_after passed",
    "tenant",
    "input_ref",
    "kind with a schema and a queue",
    "replay of",
]


@pytest.mark.parametrize("case", CASES)
def test_a_plain_request__submit_many_writes_the_rows_job_submit_writes(
    user: Any, tenant: Any, broker: redis.Redis, case: str
) -> None:
    request = _request_of(case, user, tenant)
    single = jobs.submit(**request)

    many = jobs.submit_many([_plain(user, 100), request, _plain(user, 101)])[1]

    by_submit, by_many = _written(single.pk), _written(many.pk)
    assert {
        table: _differences(by_submit[table], by_many[table], _IDS[table]) for table in _IDS
    } == {table: {} for table in _IDS}
    job, event, message = (by_many[table] for table in _IDS)
    assert event["job_id"] == message["job_id"] == job["id"] == many.pk
    # Times: the same offsets as job_submit's (a deferred job's are exact).
    due = request.get("run_after")
    if due is not None and due > timezone.now():
        assert job["next_attempt_at"] == message["available_at"] == due
        assert job["deadline"] == by_submit["jobs_job"]["deadline"]
        assert message["reserved_until"] is None
    else:
        assert message["available_at"] == job["next_attempt_at"] == job["created_at"]
        assert message["reserved_until"] - message["available_at"] == timedelta(
            seconds=outbox_settings.RESERVATION_SECONDS
        )
    assert job["deadline"] - job["next_attempt_at"] == (
        by_submit["jobs_job"]["deadline"] - by_submit["jobs_job"]["next_attempt_at"]
    )


def test_returned_jobs__equal_their_rows__in_request_order(
    user: Any, tenant: Any, broker: redis.Redis, django_assert_num_queries: Any
) -> None:
    requests = [_request_of(case, user, tenant) for case in CASES]
    single = [jobs.submit(**request) for request in requests]

    many = jobs.submit_many(requests)

    names = [f.attname for f in Job._meta.concrete_fields]
    for request, by_submit, by_many in zip(requests, single, many, strict=True):
        loaded = Job.objects.get(pk=by_many.pk)
        assert [getattr(by_many, n) for n in names] == [getattr(loaded, n) for n in names]
        assert not by_many._state.adding and by_many._state.db == "default"
        assert by_many.replayed is False
        assert (
            _differences(
                {n: getattr(by_submit, n) for n in names},
                {n: getattr(by_many, n) for n in names},
                {"id"},
            )
            == {}
        )
        with django_assert_num_queries(0):  # the request's rows, not loaded again
            assert by_many.owner is user
            assert by_many.tenant is request.get("tenant")
            assert by_many.input_ref is request.get("input_ref")
            assert by_many.replay_of is request.get("replay_of")


def test_outbox_rows__handed_to_the_fast_path_as_saved__with_their_ids(
    user: Any, broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[OutboxEntry] = []

    def recorded(entries: list[OutboxEntry]) -> None:
        handed.extend(entries)
        outbox_after_commit_many(entries)

    monkeypatch.setattr(bulk, "outbox_after_commit_many", recorded)
    requests = [_plain(user, n) for n in range(5)]
    requests.insert(2, {**_plain(user, 9), "run_after": timezone.now() + timedelta(hours=1)})

    submitted = jobs.submit_many(requests)

    assert [entry.job_id for entry in handed] == [job.pk for job in submitted]
    names = [f.attname for f in OutboxEntry._meta.concrete_fields]
    for entry in handed:
        row = OutboxEntry.objects.get(pk=entry.pk)
        assert not entry._state.adding
        assert {n: getattr(entry, n) for n in names} == {
            **{n: getattr(row, n) for n in names},
            "published_at": None,  # marked since, by the mark thread
        }
    deferred = OutboxEntry.objects.get(job_id=submitted[2].pk)
    assert deferred.published_at is None
    assert [job_ids_of(m) for m in broker_messages(broker)] == [
        [str(job.pk) for n, job in enumerate(submitted) if n != 2]
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"tenant": Tenant(name="unsaved")}, ValueError),
        ({"input": {"when": timezone.now()}}, TypeError),
    ],
    ids=["unsaved tenant", "input not JSON"],
)
def test_a_plain_request_the_orm_refuses__raises_before_any_insert(
    user: Any, fields: dict[str, Any], error: type[Exception]
) -> None:
    requests = [_plain(user, n) for n in range(3)]
    requests.insert(1, {**_plain(user, 1), **fields})

    with CaptureQueriesContext(connection) as captured, pytest.raises(error):
        jobs.submit_many(requests)

    assert _inserts(captured) == {}
    assert _nothing_written()
