"""Follow-ups (`ctx.submit`) and fan-in (`after=`): written with the parent's success only,
released by the database whatever path ends a dependency (jobs.links)."""

from __future__ import annotations

import threading
from typing import Any
from uuid import UUID

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from django.test import Client

import jobs
import tests.kinds_links  # noqa: F401  (registers the kinds in this process too)
from jobs import batch, services
from jobs.exceptions import InvalidDependency
from jobs.ids import uuid7
from jobs.links import DORMANT_AT
from jobs.models import Job, JobEvent, QuarantineRecord
from jobs.quarantine import quarantine_discard
from jobs.runtime import Outcome
from outbox.models import OutboxEntry
from tests.harness import wait_until
from tests.integration.api_helpers import error_code, submit, token_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _rows_stay_in_the_outbox(settings: Any) -> None:
    """In-process runs: nothing is published."""
    settings.OUTBOX_FAST_PATH = False


def _job(pk: Any) -> Job:
    return Job.objects.get(pk=pk)


def _result(pk: Any) -> dict[str, Any]:
    result = _job(pk).result
    assert isinstance(result, dict)
    return result


def _message(pk: Any) -> OutboxEntry:
    [row] = OutboxEntry.objects.filter(job_id=pk)
    return row


def test_follow_ups__written_with_the_parent_success__linked_to_it(user: Any) -> None:
    parent = jobs.submit(kind="links.fan_out", input={"n": 3}, owner=user)

    assert jobs.execute(parent.pk).outcome is Outcome.SUCCEEDED

    result = _result(parent.pk)
    children = list(Job.objects.filter(parent=parent).order_by("pk"))
    assert [str(c.pk) for c in children] == sorted(result["children"])
    assert {(c.kind, c.state, c.owner_id, c.tenant_id) for c in children} == {
        ("links.leaf", "queued", user.pk, None)
    }
    assert all(_message(c.pk).available_at < DORMANT_AT for c in children)


def test_follow_ups__a_failed_parent_submits_nothing(user: Any) -> None:
    parent = jobs.submit(
        kind="links.fan_out", input={"n": 3, "join": True, "fail": True}, owner=user
    )

    assert jobs.execute(parent.pk).outcome is Outcome.QUARANTINED

    assert not Job.objects.filter(parent=parent).exists()
    assert Job.objects.count() == 1


def test_fan_in__waits_for_every_child__then_runs_once_with_their_outcomes(user: Any) -> None:
    parent = jobs.submit(kind="links.fan_out", input={"n": 3, "join": True}, owner=user)
    assert jobs.execute(parent.pk).outcome is Outcome.SUCCEEDED
    result = _result(parent.pk)
    join_id, leaves = UUID(result["join"]), [UUID(c) for c in result["children"]]
    join = _job(join_id)
    assert (join.state, join.waiting_for, join.parent_id) == ("waiting", 3, parent.pk)
    assert _message(join_id).available_at == DORMANT_AT
    assert jobs.execute(join_id).outcome is Outcome.DEFERRED  # a stray message runs nothing

    for done, leaf in enumerate(leaves[:2], start=1):
        assert jobs.execute(leaf).outcome is Outcome.SUCCEEDED
        assert (_job(join_id).state, _job(join_id).waiting_for) == ("waiting", 3 - done)
    assert jobs.execute(leaves[2]).outcome is Outcome.SUCCEEDED

    released = _job(join_id)
    assert (released.state, released.waiting_for) == ("queued", 0)
    assert released.next_attempt_at is not None
    assert _message(join_id).available_at <= released.next_attempt_at
    assert jobs.execute(join_id).outcome is Outcome.SUCCEEDED
    seen = _result(join_id)["dependencies"]
    assert [(d["id"], d["state"], d["result"]) for d in seen] == [
        (str(leaf), "succeeded", {"i": i})
        for i, leaf in sorted(enumerate(leaves), key=lambda x: x[1])
    ]
    reasons = list(JobEvent.objects.filter(job_id=join_id).values_list("to_state", "reason"))
    assert reasons[:2] == [("waiting", "accepted"), ("queued", "released: every dependency ended")]


def test_after__existing_jobs_already_ended__released_at_once(user: Any) -> None:
    leaf = jobs.submit(kind="links.leaf", input={}, owner=user)
    assert jobs.execute(leaf.pk).outcome is Outcome.SUCCEEDED

    join = jobs.submit(kind="links.join", input={}, owner=user, after=[leaf.pk])

    assert (join.state, _job(join.pk).state, join.waiting_for) == ("queued", "queued", 0)
    assert _message(join.pk).available_at < DORMANT_AT


def test_after__unknown_or_another_owners_job__refused_nothing_written(
    user: Any, other_user: Any
) -> None:
    theirs = jobs.submit(kind="links.leaf", input={}, owner=other_user)
    for after in ([theirs.pk], ["00000000-0000-7000-8000-000000000000"], ["not an id"]):
        with pytest.raises(InvalidDependency):
            jobs.submit(kind="links.join", input={}, owner=user, after=after)
    assert Job.objects.count() == 1
    assert not _job(theirs.pk).has_waiters


def test_after__a_failed_dependency__runs_the_waiter__or_cancels_it(user: Any) -> None:
    bad = jobs.submit(kind="links.leaf", input={"fail": True}, owner=user)
    good = jobs.submit(kind="links.leaf", input={}, owner=user)
    runs = jobs.submit(kind="links.join", input={}, owner=user, after=[bad.pk, good.pk])
    cancels = jobs.submit(
        kind="links.join", input={}, owner=user, after=[bad.pk, good.pk], after_failure="cancel"
    )
    after_cancelled = jobs.submit(kind="links.join", input={}, owner=user, after=[cancels.pk])

    assert jobs.execute(bad.pk).outcome is Outcome.QUARANTINED
    assert _job(runs.pk).state == _job(cancels.pk).state == "waiting"  # quarantine: not ended
    record = QuarantineRecord.objects.get(job_id=bad.pk)
    quarantine_discard(record_id=record.pk, actor="operator", note="bad input")  # -> failed

    assert _job(cancels.pk).state == "cancelled"
    assert _job(cancels.pk).error_category == "dependency_failed"
    assert not OutboxEntry.objects.filter(job_id=cancels.pk).exists()  # its dormant row went
    assert _job(after_cancelled.pk).state == "queued"  # a cancel ends a job: released
    assert _job(runs.pk).state == "waiting"
    assert jobs.execute(good.pk).outcome is Outcome.SUCCEEDED
    assert _job(runs.pk).state == "queued"


def test_after__a_waiting_job_cancelled__its_dormant_message_dropped(user: Any) -> None:
    leaf = jobs.submit(kind="links.leaf", input={}, owner=user)
    join = jobs.submit(kind="links.join", input={}, owner=user, after=[leaf.pk])

    services.job_cancel(job_id=join.pk, actor="test")

    assert _job(join.pk).state == "cancelled"
    assert not OutboxEntry.objects.filter(job_id=join.pk).exists()
    assert jobs.execute(leaf.pk).outcome is Outcome.SUCCEEDED  # nothing left to release


def test_after__a_dependency_cancelled_from_queued__releases(user: Any) -> None:
    leaf = jobs.submit(kind="links.leaf", input={}, owner=user)
    join = jobs.submit(kind="links.join", input={}, owner=user, after=[leaf.pk])

    services.job_cancel(job_id=leaf.pk, actor="test")

    assert _job(join.pk).state == "queued"


def _items(*batch_jobs: Job) -> list[dict[str, Any]]:
    return [{"job_id": str(j.pk), "kind": j.kind, "kind_version": 1} for j in batch_jobs]


def test_follow_ups__a_parent_whose_lease_was_lost__submits_nothing(user: Any) -> None:
    parent = jobs.submit(kind="links.stolen", input={}, owner=user)

    assert jobs.execute(parent.pk).outcome is Outcome.STALE

    assert not Job.objects.filter(parent=parent).exists()


def test_follow_ups__group_commit__written_for_the_jobs_whose_fence_held(user: Any) -> None:
    fan_out = jobs.submit(kind="links.fan_out_batched", input={"n": 2, "join": True}, owner=user)
    plain = jobs.submit(kind="links.leaf", input={}, owner=user)
    lost = jobs.submit(kind="links.stolen", input={}, owner=user)

    reports = batch.execute_many(_items(fan_out, plain, lost))

    assert [r.outcome for r in reports] == [Outcome.SUCCEEDED, Outcome.SUCCEEDED, Outcome.STALE]
    assert Job.objects.filter(parent=fan_out).count() == 3
    assert not Job.objects.filter(parent=lost).exists()
    join = Job.objects.get(parent=fan_out, kind="links.join")
    assert (join.state, join.waiting_for) == ("waiting", 2)
    leaves = list(Job.objects.filter(parent=fan_out, kind="links.leaf"))

    assert [r.outcome for r in batch.execute_many(_items(*leaves))] == [Outcome.SUCCEEDED] * 2

    assert _job(join.pk).state == "queued"


# --- API and admin ---------------------------------------------------------------------------


def test_api__parent_children_and_waiting_for__shown_and_listed(alice: Any) -> None:
    client = token_client(alice)
    response = submit(client, {"kind": "links.fan_out", "input": {"n": 2, "join": True}})
    assert response.status_code == 202, response.content
    parent_id = response.json()["id"]
    assert jobs.execute(parent_id).outcome is Outcome.SUCCEEDED

    parent = client.get(f"/api/jobs/{parent_id}/").json()
    assert (parent["parent"], parent["children"], parent["waiting_for"]) == (None, 3, None)
    listed = client.get(f"/api/jobs/?parent={parent_id}").json()["results"]
    assert len(listed) == 3 and {job["parent"] for job in listed} == {parent_id}
    assert all(job["children"] == 0 for job in listed)
    [join] = [job for job in listed if job["kind"] == "links.join"]
    assert (join["status"], join["waiting_for"]) == ("queued", 2)  # waiting shows as queued
    assert client.get("/api/jobs/?parent=not-an-id").status_code == 400


def test_api__after__a_waiting_job__unknown_ids_a_400_nothing_written(
    alice: Any, other_user: Any
) -> None:
    client = token_client(alice)
    leaf = submit(client, {"kind": "links.leaf"}).json()["id"]
    theirs = jobs.submit(kind="links.leaf", input={}, owner=other_user)

    waiting = submit(client, {"kind": "links.join", "after": [leaf]})
    refused = [
        submit(client, {"kind": "links.join", "after": after})
        for after in ([str(theirs.pk)], ["nope"], [leaf, str(uuid7())])
    ]
    wrong_choice = submit(client, {"kind": "links.join", "after": [leaf], "after_failure": "x"})

    assert waiting.status_code == 202, waiting.content
    body = client.get(f"/api/jobs/{waiting.json()['id']}/").json()
    assert (body["status"], body["waiting_for"]) == ("queued", 1)
    assert [r.status_code for r in [*refused, wrong_choice]] == [400] * 4
    assert error_code(refused[0]) == "invalid_dependency"
    assert Job.objects.count() == 3


def test_admin__job_page__children_and_dependencies_linked(user: Any) -> None:
    parent = jobs.submit(kind="links.fan_out", input={"n": 2, "join": True}, owner=user)
    assert jobs.execute(parent.pk).outcome is Outcome.SUCCEEDED
    join = Job.objects.get(parent=parent, kind="links.join")
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("root", password="pw"))

    parent_page = client.get(f"/admin/jobs/job/{parent.pk}/change/").content.decode()
    join_page = client.get(f"/admin/jobs/job/{join.pk}/change/").content.decode()
    children = client.get(f"/admin/jobs/job/?parent__exact={parent.pk}")

    assert f"?parent__exact={parent.pk}" in parent_page and "3 job(s)" in parent_page
    assert join_page.count("(queued)") == 2  # its two dependencies, linked, with their states
    assert children.status_code == 200 and str(join.pk) in children.content.decode()


# --- the release under concurrency, and its cost for ordinary jobs ---------------------------

_END = (
    "UPDATE jobs_job SET state = 'cancelled', finished_at = now(), updated_at = now() WHERE id = %s"
)


def _blocked_on_a_lock(pid: int | None = None) -> bool:
    """A session of this database (that one, or any other than ours) waits for a lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND (%s::int IS NULL OR pid = %s::int)",
            [pid, pid],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def test_two_dependencies_ending_at_once__exactly_one_of_them_releases(user: Any) -> None:
    """Each end counts down under the waiter's row lock: the second waits for the first's
    commit, then sees its count."""
    a, b = (jobs.submit(kind="links.leaf", input={}, owner=user) for _ in range(2))
    join = jobs.submit(kind="links.join", input={}, owner=user, after=[a.pk, b.pk])
    params = connection.get_connection_params()
    with psycopg.connect(**params) as first, psycopg.connect(**params) as second:
        first.execute(_END, [a.pk])  # counts 2 -> 1, holding the waiter's row lock

        def end_b() -> None:
            second.execute(_END, [b.pk])
            second.commit()

        thread = threading.Thread(target=end_b)
        thread.start()
        wait_until(lambda: _blocked_on_a_lock(second.info.backend_pid), what="the second end")
        first.commit()
        thread.join(timeout=30)

    released = _job(join.pk)
    assert (released.state, released.waiting_for) == ("queued", 0)
    assert JobEvent.objects.filter(job_id=join.pk, to_state="queued").count() == 1
    assert _message(join.pk).available_at < DORMANT_AT


def test_after__a_dependency_ending_while_the_waiter_is_submitted__counted_once(
    user: Any,
) -> None:
    """The submit locks its dependencies: one that ends meanwhile is read as ended once its
    transaction commits (released at once), never missed by both."""
    dependency = jobs.submit(kind="links.leaf", input={}, owner=user)
    submitted: dict[str, Job] = {}

    def submit_waiter() -> None:
        try:
            submitted["job"] = jobs.submit(
                kind="links.join", input={}, owner=user, after=[dependency.pk]
            )
        finally:
            connection.close()

    params = connection.get_connection_params()
    with psycopg.connect(**params) as ender:
        ender.execute(_END, [dependency.pk])  # ended, not committed: the row stays locked
        thread = threading.Thread(target=submit_waiter)
        thread.start()
        wait_until(_blocked_on_a_lock, what="the submit to wait for the dependency's row")
        ender.commit()
        thread.join(timeout=30)

    waiter = _job(submitted["job"].pk)
    assert (waiter.state, waiter.waiting_for) == ("queued", 0)
    assert not _job(dependency.pk).has_waiters  # ended before it was named: no trigger to run


class _RolledBack(Exception):
    pass


def test_trigger__never_called_for_a_job_without_links(user: Any) -> None:
    """With the trigger's function replaced by one that raises (in a transaction rolled back
    at once), an ordinary job finishes; a job with waiters does not: the WHEN clause alone
    keeps ordinary jobs' state changes off the function."""
    ordinary = jobs.submit(kind="links.leaf", input={}, owner=user)
    named = jobs.submit(kind="links.leaf", input={}, owner=user)
    jobs.submit(kind="links.join", input={}, owner=user, after=[named.pk])
    raising = (
        "CREATE OR REPLACE FUNCTION jobs_job_after_state() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ BEGIN RAISE EXCEPTION 'called for %', NEW.id; END; $$"
    )
    with pytest.raises(_RolledBack), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(raising)
        cursor.execute(_END, [ordinary.pk])  # queued -> cancelled: no call
        with pytest.raises(DatabaseError, match="called for"), transaction.atomic():
            cursor.execute(_END, [named.pk])
        raise _RolledBack
    assert _job(ordinary.pk).state == "queued"  # rolled back with the replacement
