"""The ticker on real PostgreSQL (jobs.scheduler), with a controlled clock: one job per tick,
the catch-up policies, two tickers racing, pause and resume with notes, definitions synced
from code and settings; the admin, /ops/ and /metrics show it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client

from jobs import registry, scheduler
from jobs.exceptions import ScheduleStateConflict
from jobs.models import Job, Schedule, ScheduleEvent
from jobs.ticks import ScheduleInvalid, tick_business_key
from outbox import failpoints

pytestmark = pytest.mark.django_db

KIND = "test.sched.minutely"
T0 = datetime(2027, 1, 4, 12, 0, 0, 500000, tzinfo=UTC)  # half a second past 12:00


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def _handler(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    return {}


@pytest.fixture
def scheduled(request: pytest.FixtureRequest) -> Iterator[str]:
    """A kind ticking every minute; its catch-up policy the test's indirect parameter."""
    catch_up = getattr(request, "param", "all")
    registry.handler(KIND, schedule="* * * * *", catch_up=catch_up, schedule_input={"n": 1})(
        _handler
    )
    yield KIND
    registry.unregister(KIND)


def tick_jobs(kind: str = KIND) -> list[str]:
    return sorted(
        str(k) for k in Job.objects.filter(kind=kind).values_list("business_key", flat=True)
    )


def keys(*ticks: datetime) -> list[str]:
    return sorted(tick_business_key(KIND, t) for t in ticks)


def at(hour: int, minute: int) -> datetime:
    return datetime(2027, 1, 4, hour, minute, tzinfo=UTC)


def test_first_sync__creates_the_row_first_tick_after_now_and_no_job(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)

    row = Schedule.objects.get(name=KIND)
    assert (row.kind, row.cron, row.timezone, row.catch_up) == (KIND, "* * * * *", "UTC", "all")
    assert row.decided_through == T0 and row.next_tick == at(12, 1)
    assert tick_jobs() == []
    assert ScheduleEvent.objects.get(schedule=row).action == "created"


def test_due_ticks__one_job_each__keyed_by_the_tick__owned_by_the_scheduler(
    scheduled: str,
) -> None:
    scheduler.schedules_tick(now=T0)
    report = scheduler.schedules_tick(now=T0 + minutes(3))

    assert report.submitted == {KIND: 3}
    assert tick_jobs() == keys(at(12, 1), at(12, 2), at(12, 3))
    job = Job.objects.filter(kind=KIND).first()
    assert job is not None and job.input == {"n": 1} and job.tenant_id is None
    assert job.owner.username == "jobs-scheduler" and not job.owner.has_usable_password()
    assert not job.owner.is_staff
    row = Schedule.objects.get(name=KIND)
    assert (row.last_tick, row.next_tick, row.submitted_ticks) == (at(12, 3), at(12, 4), 3)
    assert row.last_job_id in set(Job.objects.filter(kind=KIND).values_list("pk", flat=True))


def test_ticked_again_at_the_same_time__no_second_job(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    scheduler.schedules_tick(now=T0 + minutes(2))
    again = scheduler.schedules_tick(now=T0 + minutes(2))

    assert again.submitted == {}
    assert len(tick_jobs()) == 2


def test_cursor_moved_back_by_hand__the_database_key_gives_the_same_jobs_again(
    scheduled: str,
) -> None:
    scheduler.schedules_tick(now=T0)
    scheduler.schedules_tick(now=T0 + minutes(2))
    first = sorted(Job.objects.filter(kind=KIND).values_list("pk", flat=True))
    Schedule.objects.filter(name=KIND).update(
        decided_through=T0, next_tick=at(12, 1), last_tick=None
    )

    scheduler.schedules_tick(now=T0 + minutes(2))

    assert sorted(Job.objects.filter(kind=KIND).values_list("pk", flat=True)) == first


@pytest.mark.parametrize("scheduled", ["latest"], indirect=True)
def test_catch_up_latest__a_ticker_down_for_ten_ticks_runs_the_last_and_counts_nine(
    scheduled: str,
) -> None:
    scheduler.schedules_tick(now=T0)
    report = scheduler.schedules_tick(now=T0 + minutes(10))

    assert (report.submitted, report.missed) == ({KIND: 1}, {KIND: 9})
    assert tick_jobs() == keys(at(12, 10))
    row = Schedule.objects.get(name=KIND)
    assert (row.missed_ticks, row.last_tick) == (9, at(12, 10))


@pytest.mark.parametrize("scheduled", ["skip_older"], indirect=True)
def test_catch_up_skip_older__ticks_older_than_n_are_missed(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    report = scheduler.schedules_tick(now=T0 + minutes(15))  # 600 s: 12:06 .. 12:15 run

    assert (report.submitted, report.missed) == ({KIND: 10}, {KIND: 5})
    assert tick_jobs() == keys(*(at(12, m) for m in range(6, 16)))


def test_catch_up_all__a_long_outage_catches_up_in_steps_of_the_per_run_limit(
    scheduled: str,
) -> None:
    scheduler.schedules_tick(now=T0)
    horizon = T0 + minutes(150)
    first = scheduler.schedules_tick(now=horizon)
    second = scheduler.schedules_tick(now=horizon)

    assert (first.submitted, second.submitted) == ({KIND: 100}, {KIND: 50})
    assert tick_jobs() == keys(*(T0.replace(microsecond=0) + minutes(m) for m in range(1, 151)))


def test_failpoint_after_submit__jobs_roll_back_with_the_cursor(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    failpoints.configure(f"{scheduler.AFTER_SUBMIT}=raise")
    try:
        report = scheduler.schedules_tick(now=T0 + minutes(2))
    finally:
        failpoints.configure("")

    assert report.failed == [KIND]
    assert tick_jobs() == []
    assert Schedule.objects.get(name=KIND).decided_through == T0
    scheduler.schedules_tick(now=T0 + minutes(2))
    assert tick_jobs() == keys(at(12, 1), at(12, 2))


@pytest.mark.django_db(transaction=True)
def test_two_tickers_at_once__each_tick_one_job(scheduled: str) -> None:
    """Two threads, each with its own connection, tick the same schedule at the same moment;
    the first to lock it holds it while it submits (a failpoint sleep), the other passes it by."""
    scheduler.schedules_tick(now=T0)
    failpoints.configure(f"{scheduler.AFTER_SUBMIT}=sleep:0.5")
    start = threading.Barrier(2)
    reports: list[scheduler.TickReport] = []

    def ticker() -> None:
        try:
            start.wait()
            reports.append(scheduler.schedules_tick(now=T0 + minutes(5)))
        finally:
            connection.close()

    threads = [threading.Thread(target=ticker) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        failpoints.configure("")

    assert sorted(sum(r.submitted.values()) for r in reports) == [0, 5]
    assert tick_jobs() == keys(*(at(12, m) for m in range(1, 6)))


def test_pause__no_ticks__resume_skips_the_paused_ticks__both_noted(scheduled: str) -> None:
    began = datetime.now(UTC) - minutes(10)
    scheduler.schedules_tick(now=began)
    row = Schedule.objects.get(name=KIND)
    paused = scheduler.schedule_pause(schedule_id=row.pk, actor="olga", note="provider outage")
    assert (paused.paused, paused.paused_by, paused.pause_note) == (True, "olga", "provider outage")

    assert scheduler.schedules_tick(now=began + minutes(10)).submitted == {}
    assert tick_jobs() == []

    resumed = scheduler.schedule_resume(schedule_id=row.pk, actor="olga", note="provider back")
    assert not resumed.paused and resumed.decided_through >= began + minutes(10)
    scheduler.schedules_tick(now=resumed.decided_through + minutes(2))
    assert len(tick_jobs()) == 2  # the two minutes after the resume, none of the pause's ten
    events = list(ScheduleEvent.objects.filter(schedule=row).values_list("action", "actor", "note"))
    assert events[1:] == [
        ("paused", "olga", "provider outage"),
        ("resumed", "olga", "provider back"),
    ]
    resume = ScheduleEvent.objects.get(schedule=row, action="resumed")
    assert resume.details["skipped_while_paused"] in (9, 10, 11)


def test_pause_without_a_note__refused_and_nothing_changes(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    row = Schedule.objects.get(name=KIND)

    with pytest.raises(ScheduleStateConflict, match="Write a note"):
        scheduler.schedule_pause(schedule_id=row.pk, actor="olga", note="  ")
    with pytest.raises(ScheduleStateConflict, match="is not paused"):
        scheduler.schedule_resume(schedule_id=row.pk, actor="olga", note="why not")

    assert not Schedule.objects.get(pk=row.pk).paused


def test_definition_changed_in_code__row_follows__cursor_and_pause_stay(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    row = Schedule.objects.get(name=KIND)
    scheduler.schedule_pause(schedule_id=row.pk, actor="olga", note="hold")
    registry.handler(KIND, schedule="*/5 * * * *", schedule_input={"n": 2})(_handler)

    scheduler.schedules_tick(now=T0 + minutes(1))

    row.refresh_from_db()
    assert (row.cron, row.input, row.paused, row.decided_through) == (
        "*/5 * * * *",
        {"n": 2},
        True,
        T0,
    )
    assert row.next_tick == at(12, 5)
    change = ScheduleEvent.objects.get(schedule=row, action="changed")
    assert change.details["before"]["cron"] == "* * * * *"


def test_removed_from_code__not_ticked__row_and_history_stay(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    registry.unregister(KIND)

    scheduler.schedules_tick(now=T0 + minutes(5))

    assert tick_jobs() == []
    assert Schedule.objects.filter(name=KIND).exists()


def test_jobs_schedules_setting__a_schedule_of_a_kind_defined_elsewhere(
    settings: Any, scheduled: str
) -> None:
    settings.JOBS_SCHEDULES = {
        "nightly-minutely": {"kind": KIND, "cron": "*/2 * * * *", "catch_up": "latest"}
    }
    scheduler.schedules_tick(now=T0)
    scheduler.schedules_tick(now=T0 + minutes(4))

    row = Schedule.objects.get(name="nightly-minutely")
    assert (row.source, row.catch_up) == ("settings", "latest")
    assert Job.objects.filter(business_key__startswith="schedule:nightly-minutely@").count() == 1


def test_bad_definitions__refused_where_they_are_written(settings: Any) -> None:
    with pytest.raises(ScheduleInvalid, match="unknown timezone"):
        registry.handler("test.sched.bad", schedule="0 3 * * *", timezone="Europe/Nowhere")
    settings.JOBS_SCHEDULES = {"x": {"kind": "k", "cron": "0 3 * *"}, "y": {"crn": "1"}}
    from jobs.checks import jobs_schedule_checks

    found = jobs_schedule_checks()
    assert [e.id for e in found] == ["jobs.E031", "jobs.E031"]
    assert "must be 5 fields" in found[0].msg and "unknown keys ['crn']" in found[1].msg


def test_owner_setting_empty__system_check_error(settings: Any) -> None:
    from jobs.checks import jobs_schedule_checks

    settings.JOBS_SCHEDULE_OWNER = ""

    assert [e.id for e in jobs_schedule_checks()] == ["jobs.E030"]


# --- admin, /ops/, /metrics -----------------------------------------------------------------


def operator(*, can_pause: bool) -> Client:
    staff = User.objects.create_user(username="operator", password="pw", is_staff=True)
    names = ["view_schedule", "view_scheduleevent", *(["pause_schedule"] if can_pause else [])]
    staff.user_permissions.add(*Permission.objects.filter(codename__in=names))
    client = Client()
    client.force_login(staff)
    return client


def _act(client: Client, action: str, row: Schedule, note: str) -> Any:
    return client.post(
        "/admin/jobs/schedule/",
        {"action": action, "index": 0, "_selected_action": [row.pk], "note": note},
        follow=True,
    )


def test_admin_pause_and_resume__need_a_note__recorded_with_who(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    row = Schedule.objects.get(name=KIND)
    client = operator(can_pause=True)

    refused = _act(client, "pause", row, "")
    assert "Write a note saying why before you pause" in refused.content.decode()
    assert not Schedule.objects.get(pk=row.pk).paused

    _act(client, "pause", row, "month-end freeze")
    row.refresh_from_db()
    assert (row.paused, row.paused_by, row.pause_note) == (True, "operator", "month-end freeze")
    page = client.get(f"/admin/jobs/schedule/{row.pk}/change/").content.decode()
    assert "month-end freeze" in page

    _act(client, "resume", row, "freeze over")
    row.refresh_from_db()
    assert not row.paused
    assert list(ScheduleEvent.objects.filter(schedule=row).values_list("action", "actor")) == [
        ("created", ""),
        ("paused", "operator"),
        ("resumed", "operator"),
    ]


def test_admin_without_pause_permission__no_actions(scheduled: str) -> None:
    scheduler.schedules_tick(now=T0)
    row = Schedule.objects.get(name=KIND)
    client = operator(can_pause=False)

    page = client.get("/admin/jobs/schedule/")
    assert page.status_code == 200 and KIND in page.content.decode()
    _act(client, "pause", row, "no rights")
    assert not Schedule.objects.get(pk=row.pk).paused


def test_ops_page_and_metrics__last_and_next_tick_paused_and_missed(
    scheduled: str, admin_client: Client, settings: Any
) -> None:
    settings.JOBS_SCHEDULES = {
        "every-two": {"kind": KIND, "cron": "*/2 * * * *", "catch_up": "latest"}
    }
    now = datetime.now(UTC)
    scheduler.schedules_tick(now=now - minutes(10))
    scheduler.schedules_tick(now=now)  # "latest": the newest of five ticks runs, four missed
    every_two = Schedule.objects.get(name="every-two")
    scheduler.schedule_pause(schedule_id=every_two.pk, actor="olga", note="hold it")

    page = admin_client.get("/ops/").content.decode()
    assert 'id="schedules"' in page and "every-two" in page and "hold it" in page
    metrics = admin_client.get("/metrics").content.decode()
    assert 'jobs_schedule_missed_ticks_total{schedule="every-two"} 4.0' in metrics
    assert 'jobs_schedule_paused{schedule="every-two"} 1.0' in metrics
    assert f'jobs_schedule_submitted_ticks_total{{schedule="{KIND}"}} 10.0' in metrics
    assert 'jobs_schedule_next_tick_timestamp_seconds{schedule="every-two"}' in metrics


def test_command__lists__pauses_and_resumes_with_a_note(scheduled: str) -> None:
    from io import StringIO

    from django.core.management import CommandError, call_command

    scheduler.schedules_tick(now=T0)
    out = StringIO()
    call_command("jobs_schedules", stdout=out)
    assert f"{KIND}  [" in out.getvalue() and "catch_up=all" in out.getvalue()

    with pytest.raises(CommandError, match="Write a note"):
        call_command("jobs_schedules", "--pause", KIND)
    with pytest.raises(CommandError, match="no schedule named 'nope'"):
        call_command("jobs_schedules", "--pause", "nope", "--note", "x")
    call_command("jobs_schedules", "--pause", KIND, "--note", "db upgrade", stdout=StringIO())
    row = Schedule.objects.get(name=KIND)
    assert row.paused and row.pause_note == "db upgrade" and row.paused_by.startswith("shell:")

    listed = StringIO()
    call_command("jobs_schedules", "--resume", KIND, "--note", "done", "--json", stdout=listed)
    assert not Schedule.objects.get(name=KIND).paused
    assert '"name": "test.sched.minutely"' in listed.getvalue().split("\n", 1)[1]
