"""Cron ticks and the catch-up policy (jobs.ticks): pure, no database, the clock passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobs.ticks import (
    CatchUp,
    ScheduleInvalid,
    ScheduleSpec,
    tick_business_key,
    tick_next,
    tick_plan,
    ticks_between,
)

BERLIN = ZoneInfo("Europe/Berlin")


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def day_ticks(cron: str, zone: ZoneInfo, day: datetime) -> list[datetime]:
    """The ticks of one local calendar day."""
    start = day.replace(tzinfo=zone)
    end = (day + timedelta(days=1)).replace(tzinfo=zone)
    return list(ticks_between(cron, zone, after=start - timedelta(microseconds=1), until=end))


def test_0230_on_the_spring_forward_day__runs_once_at_0300() -> None:
    ticks = day_ticks("30 2 * * *", BERLIN, datetime(2027, 3, 28))

    assert ticks == [utc(2027, 3, 28, 1, 0)]  # 03:00 CEST: 02:30 does not exist that day
    assert ticks[0].astimezone(BERLIN).strftime("%H:%M %Z") == "03:00 CEST"


def test_0230_on_the_fall_back_day__runs_once_on_its_first_occurrence() -> None:
    ticks = day_ticks("30 2 * * *", BERLIN, datetime(2027, 10, 31))

    assert ticks == [utc(2027, 10, 31, 0, 30)]  # 02:30 CEST, not again at 02:30 CET
    assert ticks[0].astimezone(BERLIN).strftime("%H:%M %Z") == "02:30 CEST"


def test_0230_the_days_around_dst__once_a_day_at_0230_local() -> None:
    start = datetime(2027, 3, 25, tzinfo=BERLIN)
    ticks = list(ticks_between("30 2 * * *", BERLIN, after=start, until=start + timedelta(days=7)))

    local = [t.astimezone(BERLIN).strftime("%m-%d %H:%M") for t in ticks]
    assert local == [
        "03-25 02:30",
        "03-26 02:30",
        "03-27 02:30",
        "03-28 03:00",
        "03-29 02:30",
        "03-30 02:30",
        "03-31 02:30",
    ]


def test_hourly_on_the_fall_back_day__ticks_both_0230s_as_two_instants() -> None:
    ticks = day_ticks("30 * * * *", BERLIN, datetime(2027, 10, 31))

    assert len(ticks) == 25  # the day has 25 hours
    assert utc(2027, 10, 31, 0, 30) in ticks and utc(2027, 10, 31, 1, 30) in ticks
    assert ticks == sorted(set(ticks))


def test_started_inside_the_repeated_hour__never_answers_an_earlier_instant() -> None:
    # 02:15 CET (the second 02:15): cronsim's wall clock says 02:30 CEST comes next, which
    # is 45 minutes in the past; the tick after it is the next day's.
    after = utc(2027, 10, 31, 1, 15)

    assert tick_next("30 2 * * *", BERLIN, after=after) == utc(2027, 11, 1, 1, 30)


def test_a_timezone_moves_the_instant() -> None:
    after = utc(2027, 1, 10, 0, 0)

    assert tick_next("0 3 * * *", ZoneInfo("America/New_York"), after=after) == utc(
        2027, 1, 10, 8, 0
    )
    assert tick_next("0 3 * * *", ZoneInfo("UTC"), after=after) == utc(2027, 1, 10, 3, 0)


def test_six_fields__seconds_first() -> None:
    after = utc(2027, 1, 1, 0, 0, 0)

    ticks = list(
        ticks_between(
            "*/2 * * * * *", ZoneInfo("UTC"), after=after, until=after + timedelta(seconds=10)
        )
    )

    assert ticks == [after + timedelta(seconds=s) for s in (2, 4, 6, 8, 10)]


def test_ticks_between__excludes_after_includes_until() -> None:
    after = utc(2027, 1, 1, 3, 0)

    ticks = list(
        ticks_between("0 * * * *", ZoneInfo("UTC"), after=after, until=utc(2027, 1, 1, 5, 0))
    )

    assert ticks == [utc(2027, 1, 1, 4, 0), utc(2027, 1, 1, 5, 0)]


NOW = utc(2027, 1, 1, 12, 0)
TICKS = [NOW - timedelta(minutes=m) for m in (30, 20, 10, 5, 0)]  # in order
CURSOR = NOW - timedelta(hours=1)


def test_catch_up_all__runs_every_tick() -> None:
    plan = tick_plan(TICKS, now=NOW, catch_up=CatchUp.ALL, decided_through=CURSOR)

    assert (plan.run, plan.missed, plan.through) == (TICKS, 0, NOW)


def test_catch_up_all__at_most_limit_then_the_cursor_stops_at_the_last_taken() -> None:
    plan = tick_plan(TICKS, now=NOW, catch_up=CatchUp.ALL, decided_through=CURSOR, limit=2)

    assert (plan.run, plan.missed, plan.through) == (TICKS[:2], 0, TICKS[1])


def test_catch_up_latest__runs_the_newest_and_misses_the_rest() -> None:
    plan = tick_plan(iter(TICKS), now=NOW, catch_up=CatchUp.LATEST, decided_through=CURSOR)

    assert (plan.run, plan.missed, plan.through) == ([NOW], 4, NOW)


def test_catch_up_skip_older__runs_the_ticks_within_n_seconds() -> None:
    plan = tick_plan(
        TICKS, now=NOW, catch_up=CatchUp.SKIP_OLDER, catch_up_seconds=600, decided_through=CURSOR
    )

    assert plan.run == TICKS[2:]  # 10 minutes old is still in; 20 and 30 are not
    assert (plan.missed, plan.through) == (2, NOW)


def test_no_ticks__the_cursor_stays() -> None:
    for policy in CatchUp:
        plan = tick_plan([], now=NOW, catch_up=policy, decided_through=CURSOR)
        assert (plan.run, plan.missed, plan.through) == ([], 0, CURSOR)


def test_business_key__name_and_the_tick_in_utc() -> None:
    tick = datetime(2027, 3, 28, 3, 0, tzinfo=BERLIN)

    assert (
        tick_business_key("reports.nightly", tick)
        == "schedule:reports.nightly@2027-03-28T01:00:00Z"
    )


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"cron": "61 * * * *"}, "is not valid"),
        ({"cron": "* * *"}, "must be 5 fields"),
        ({"cron": "0 0 30 2 *"}, "not valid"),
        ({"timezone": "Mars/Olympus"}, "unknown timezone"),
        ({"name": "a@b"}, "may not contain '@'"),
        ({"name": "x" * 101}, "1 to 100 characters"),
        ({"catch_up_seconds": -1}, "at least 0"),
        ({"input": []}, "must be a JSON object"),
    ],
)
def test_invalid_definition__raises_naming_the_problem(
    changes: dict[str, object], problem: str
) -> None:
    fields: dict[str, object] = {"name": "nightly", "kind": "k", "cron": "0 3 * * *", **changes}

    with pytest.raises(ScheduleInvalid, match=problem):
        ScheduleSpec(**fields)  # type: ignore[arg-type]


def test_unknown_catch_up__raises_with_the_known_ones() -> None:
    with pytest.raises(ScheduleInvalid, match="'skip_older', 'latest', 'all'"):
        ScheduleSpec(name="n", kind="k", cron="0 3 * * *", catch_up="sometimes")  # type: ignore[arg-type]
