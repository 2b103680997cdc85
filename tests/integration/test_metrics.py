"""/metrics read from the database: known scenarios give known numbers; access is limited."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

import jobs
from jobs.claims import job_claim
from jobs.exceptions import LeaseLost
from jobs.lifecycle import job_complete
from jobs.models import Job
from jobs.ops.dashboard import ops_snapshot
from jobs.reaper import jobs_reap
from jobs.retention import jobs_prune
from jobs.runtime import Outcome, execute
from jobs.services import job_cancel
from outbox import marks
from outbox.models import OutboxEntry

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "scrape-secret-123"


def _scrape(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _expire(job_id: Any) -> None:
    Job.objects.filter(pk=job_id).update(lease_until=timezone.now() - timedelta(minutes=5))


def test_metrics_count_one_duplicate_delivery_and_one_stale_completion__no_duplicate_effects(
    user: Any, settings: Any
) -> None:
    settings.JOBS_METRICS_TOKEN = TOKEN
    # One duplicate delivery: a message for a job that already succeeded.
    done = jobs.submit(kind="noop", input={"n": 1}, owner=user)
    assert execute(done.pk).outcome is Outcome.SUCCEEDED
    assert execute(done.pk).outcome is Outcome.DUPLICATE
    # One stale completion: the old owner completes after a new generation took over.
    raced = jobs.submit(kind="noop", input={"n": 2}, owner=user)
    old = job_claim(raced, worker="old:1", lease_seconds=30)
    assert old is not None
    _expire(raced.pk)
    new = job_claim(Job.objects.get(pk=raced.pk), worker="new:1", lease_seconds=30)
    assert new is not None and new.generation == old.generation + 1
    with pytest.raises(LeaseLost):
        job_complete(old, result={"stale": True}, local_effects=[])
    job_complete(new, result={"ok": True}, local_effects=[])
    # One expired lease recovered by the reaper; one job still waiting.
    reaped = jobs.submit(kind="noop", input={"n": 3}, owner=user)
    assert job_claim(reaped, worker="dead:1", lease_seconds=30) is not None
    _expire(reaped.pk)
    assert jobs_reap().expired == 1
    jobs.submit(kind="noop", input={"n": 4}, owner=user)
    marks.flush()  # the fast path's marks (and relay_published_total) are batched

    m = _scrape(Client(), Authorization=f"Bearer {TOKEN}")

    assert m[("jobs_duplicate_deliveries_total", ())] == 1
    assert m[("jobs_stale_writes_rejected_total", ())] == 1
    assert m[("jobs_duplicate_effects_total", ())] == 0
    assert m[("jobs_expired_leases_total", ())] == 1
    assert m[("jobs_effects_reused_total", ())] == 0
    assert m[("jobs_accepted_total", ())] == 4
    assert m[("jobs_completed_total", (("outcome", "succeeded"),))] == 2
    assert m[("jobs_completed_total", (("outcome", "quarantined"),))] == 0
    assert m[("jobs_backlog", (("status", "queued"),))] == 1
    assert m[("jobs_backlog", (("status", "retry_wait"),))] == 1
    assert m[("jobs_backlog", (("status", "leased"),))] == 0
    assert m[("jobs_quarantined", ())] == 0
    assert m[("jobs_expired_leases_unreaped", ())] == 0
    published = OutboxEntry.objects.filter(published_at__isnull=False).count()
    assert m[("jobs_relay_published_total", ())] == published > 0
    assert 0 <= m[("jobs_oldest_queued_age_seconds", ())] < 60
    assert m[("jobs_latency_seconds", (("quantile", "0.5"),))] >= 0


def test_accepted_and_completed_totals__do_not_go_down_when_retention_deletes_history(
    user: Any, settings: Any
) -> None:
    """They are Prometheus counters: a value lower than the last scrape's reads as a reset,
    and rate() then counts the whole total again. The pruner deletes finished jobs every run."""
    settings.JOBS_METRICS_TOKEN = TOKEN
    ran = [jobs.submit(kind="noop", input={"n": n}, owner=user) for n in range(2)]
    for job in ran:
        assert execute(job.pk).outcome is Outcome.SUCCEEDED
    cancelled = jobs.submit(kind="noop", input={"n": 2}, owner=user)
    job_cancel(job_id=cancelled.pk, actor="test")
    waiting = jobs.submit(kind="noop", input={"n": 3}, owner=user)
    client, auth = Client(), {"Authorization": f"Bearer {TOKEN}"}
    before = _scrape(client, **auth)
    ended = [job.pk for job in ran] + [cancelled.pk]
    Job.objects.filter(pk__in=ended).update(finished_at=timezone.now() - timedelta(days=10))

    assert jobs_prune(older_than=timedelta(days=1)).deleted == 3

    after = _scrape(client, **auth)
    assert Job.objects.filter(pk__in=ended).count() == 0
    for key in (
        ("jobs_accepted_total", ()),
        ("jobs_completed_total", (("outcome", "succeeded"),)),
        ("jobs_completed_total", (("outcome", "cancelled"),)),
    ):
        assert after[key] == before[key], key
    assert (before[("jobs_accepted_total", ())], after[("jobs_accepted_total", ())]) == (4, 4)
    assert after[("jobs_completed_total", (("outcome", "succeeded"),))] == 2
    assert after[("jobs_pruned_total", (("outcome", "succeeded"),))] == 2
    assert after[("jobs_pruned_total", (("outcome", "cancelled"),))] == 1
    assert before[("jobs_pruned_total", (("outcome", "succeeded"),))] == 0
    assert ops_snapshot().accepted_total == 4  # /ops/'s "Accepted (all time)" agrees
    # And they go on counting from there.
    assert execute(waiting.pk).outcome is Outcome.SUCCEEDED
    later = _scrape(client, **auth)
    assert later[("jobs_accepted_total", ())] == 4
    assert later[("jobs_completed_total", (("outcome", "succeeded"),))] == 3


def test_metrics_read_the_oldest_due_job_and_outbox_lag__backdated_rows(
    user: Any, settings: Any
) -> None:
    settings.OUTBOX_FAST_PATH = False
    job = jobs.submit(kind="noop", input={}, owner=user)
    long_ago = timezone.now() - timedelta(seconds=120)
    Job.objects.filter(pk=job.pk).update(next_attempt_at=long_ago)
    OutboxEntry.objects.filter(job_id=job.pk).update(available_at=long_ago)
    client = Client()
    client.force_login(_staff())
    m = _scrape(client)
    assert 119 <= m[("jobs_oldest_queued_age_seconds", ())] < 180
    assert 119 <= m[("jobs_outbox_lag_seconds", ())] < 180
    assert m[("jobs_outbox_pending", ())] == 1


def test_metrics_never_expose_job_input__private_marker(user: Any) -> None:
    jobs.submit(kind="noop", input={"secret": "private-marker-7731"}, owner=user)
    client = Client()
    client.force_login(_staff())
    body = client.get("/metrics").content.decode()
    assert "private-marker-7731" not in body and "jobs_accepted_total 1.0" in body


def _staff() -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user(username="ops", password="pw", is_staff=True)


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "not_authenticated"),
        ({"Authorization": "Bearer wrong"}, 401, "not_authenticated"),
        ({"Authorization": "Basic b3BzOnB3"}, 401, "not_authenticated"),
    ],
)
def test_metrics_refuse_anonymous_scrapes__json_error(
    settings: Any, headers: dict[str, str], status: int, code: str
) -> None:
    settings.JOBS_METRICS_TOKEN = TOKEN
    response = Client().get("/metrics", headers=headers)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_metrics_refuse_logged_in_non_staff__403(user: Any) -> None:
    client = Client()
    client.force_login(user)
    response = client.get("/metrics")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"


def test_metrics_token_is_disabled__when_setting_empty(settings: Any) -> None:
    settings.JOBS_METRICS_TOKEN = ""
    response = Client().get("/metrics", headers={"Authorization": "Bearer "})
    assert response.status_code == 401


def _succeed(job_id: Any) -> None:
    """Claimed and completed as a worker does (the database allows no shortcut)."""
    lease = job_claim(Job.objects.get(pk=job_id), worker="w:1", lease_seconds=30)
    assert lease is not None
    job_complete(lease, result={}, local_effects=[])


def test_metrics_per_kind_durations__backdated_successes(user: Any) -> None:
    """Latency (accept to success) and run time (first start to success) per kind, over the
    jobs that succeeded in the last 5 minutes; older successes and other states count not."""
    now = timezone.now()
    for kind, accepted_ago, started_ago in (
        ("noop", 10.0, 4.0),
        ("noop", 30.0, 6.0),
        ("noop", 20.0, 5.0),
        ("drill.sleep", 3.0, 1.0),
    ):
        job = jobs.submit(kind=kind, input={}, owner=user)
        _succeed(job.pk)
        Job.objects.filter(pk=job.pk).update(
            created_at=now - timedelta(seconds=accepted_ago),
            started_at=now - timedelta(seconds=started_ago),
            finished_at=now,
        )
    old = jobs.submit(kind="noop", input={}, owner=user)  # succeeded 10 minutes ago
    _succeed(old.pk)
    Job.objects.filter(pk=old.pk).update(
        created_at=now - timedelta(hours=1),
        finished_at=now - timedelta(minutes=10),
    )
    jobs.submit(kind="drill.sleep", input={}, owner=user)  # still waiting
    client = Client()
    client.force_login(_staff())
    m = _scrape(client)

    def q(name: str, kind: str, quantile: str) -> float:
        return m[(name, (("kind", kind), ("quantile", quantile)))]

    assert q("jobs_kind_latency_seconds", "noop", "0.5") == pytest.approx(20.0, abs=0.5)
    assert q("jobs_kind_run_seconds", "noop", "0.5") == pytest.approx(5.0, abs=0.5)
    assert 20.0 < q("jobs_kind_latency_seconds", "noop", "0.99") <= 30.5
    assert q("jobs_kind_latency_seconds", "drill.sleep", "0.5") == pytest.approx(3.0, abs=0.5)
    assert q("jobs_kind_run_seconds", "drill.sleep", "0.95") == pytest.approx(1.0, abs=0.5)
    kinds = {dict(labels)["kind"] for name, labels in m if name == "jobs_kind_run_seconds"}
    assert kinds == {"noop", "drill.sleep"}
