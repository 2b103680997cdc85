"""The capacity model (demo.simulate): pure, deterministic, no database."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import pytest

from demo.simulate import (
    Distribution,
    Result,
    Scenario,
    chart_peak,
    compare_retries,
    simulate,
    summary_lines,
)

SEED_000 = Scenario(  # 60 documents a minute, 10 s each, with room to spare
    arrival_rate=1.0,
    service_mean=10.0,
    workers=20,
    duration=3600.0,
    distribution=Distribution.EXPONENTIAL,
    step=60.0,
    seed=7,
)


def test_in_service_matches_littles_law__seed_000_arithmetic() -> None:
    result = simulate(SEED_000)
    # lambda x W = 1/s x 10 s = 10 in service, on average.
    assert result.measured_in_service == pytest.approx(10.0, rel=0.08)
    assert result.littles_law_in_service == pytest.approx(result.measured_in_service, rel=0.01)


def test_jobs_in_system_match_littles_law__sojourn_times() -> None:
    result = simulate(SEED_000)
    mean_latency = sum(result.latencies) / len(result.latencies)
    throughput = result.completed / result.end_time
    assert result.drained
    assert result.measured_in_system == pytest.approx(throughput * mean_latency, rel=0.01)


def test_backlog_grows__arrivals_above_capacity() -> None:
    overloaded = replace(SEED_000, workers=8, duration=1800.0)  # 0.8/s capacity < 1/s
    result = simulate(overloaded)
    backlog = [s.backlog for s in result.samples if s.t <= overloaded.duration]
    ages = [s.oldest_age for s in result.samples if s.t <= overloaded.duration]
    assert backlog[-1] > 250  # ~0.2/s x 1800 s
    assert backlog[len(backlog) // 2] < backlog[-1]
    assert ages[-1] > 300


def test_backlog_drains__after_a_burst_when_arrivals_fall_below_capacity() -> None:
    burst = replace(
        SEED_000,
        workers=12,
        duration=1800.0,
        burst_at=300.0,
        burst_rate=3.0,
        burst_duration=300.0,
        deadline=120.0,
    )
    result = simulate(burst)
    at_burst_end = next(s for s in result.samples if s.t >= 600.0)
    assert at_burst_end.backlog > 300
    assert result.drained
    assert result.drain_time is not None and result.drain_time > 0
    assert result.samples[-1].backlog == 0
    # Nothing was lost, and still the customers waited too long: the deadline is missed.
    assert result.completed == result.accepted
    assert result.deadline_met is False
    assert any("deadline 120s: MISSED" in line for line in summary_lines(result))


def test_deadline_met__stable_load() -> None:
    result = simulate(replace(SEED_000, distribution=Distribution.FIXED, deadline=60.0))
    assert result.deadline_met is True
    assert result.max_latency < 60.0


def test_useful_throughput_falls__higher_retry_rate_under_saturation() -> None:
    saturated = replace(SEED_000, workers=8, duration=1800.0, max_retries=5)
    clean = simulate(replace(saturated, retry_rate=0.0))
    flaky = simulate(replace(saturated, retry_rate=0.3))

    def done_by_end_of_arrivals(result: Result) -> int:
        return max(s.completed for s in result.samples if s.t <= saturated.duration)

    # Both keep all 8 workers busy; 30% of the flaky run's attempts are wasted.
    assert done_by_end_of_arrivals(flaky) < done_by_end_of_arrivals(clean) * 0.8
    assert flaky.useful_throughput < clean.useful_throughput


def test_more_retries_add_no_capacity__seed_001_practice_question() -> None:
    saturated = replace(SEED_000, workers=8, duration=1800.0, retry_rate=0.2)
    rows = compare_retries(saturated, [0, 1, 3, 10])
    ceiling = saturated.useful_capacity
    throughputs = [row.useful_throughput for row in rows]
    assert all(t <= ceiling * 1.05 for t in throughputs)
    # Under saturation the same attempts succeed whatever the retry budget.
    assert max(throughputs) - min(throughputs) < 0.01 * ceiling
    # What more retries buy: fewer quarantined jobs, paid for with longer waits.
    assert rows[-1].quarantined < rows[0].quarantined
    assert rows[-1].p95_latency > rows[0].p95_latency


def test_same_result__same_seed() -> None:
    first, second = simulate(SEED_000), simulate(SEED_000)
    assert first.samples == second.samples
    assert simulate(replace(SEED_000, seed=8)).samples != first.samples


@pytest.mark.parametrize("distribution", list(Distribution))
def test_service_time_mean_kept__every_distribution(distribution: Distribution) -> None:
    result = simulate(replace(SEED_000, distribution=distribution))
    assert result.mean_service == pytest.approx(10.0, rel=0.05)


README_BURST = Scenario(  # the README's example: a release-day burst, a table every 300 s
    arrival_rate=1.0,
    service_mean=10.0,
    workers=12,
    duration=1800.0,
    retry_rate=0.1,
    burst_at=600.0,
    burst_rate=3.0,
    burst_duration=300.0,
    step=300.0,
    deadline=900.0,
    seed=1,
)


def test_chart_peak_equals_the_simulation_peak__coarse_table_step() -> None:
    result = simulate(README_BURST)

    peak = chart_peak(result)
    assert peak is not None
    assert (peak.backlog, peak.t) == (result.peak_backlog, result.peak_at)
    assert peak == result.peak
    # Seven table rows cannot show it; the table's highest row is below the real peak.
    assert max(s.backlog for s in result.samples) < result.peak_backlog


def test_chart_timeline_is_the_same__whatever_the_table_step() -> None:
    coarse = simulate(README_BURST)
    fine = simulate(replace(README_BURST, step=10.0))

    assert coarse.chart == fine.chart
    assert len(coarse.chart) > 20 * len(coarse.samples)
    assert coarse.chart[1].t - coarse.chart[0].t == pytest.approx(1800.0 / 600)


def test_chart_peak_equals_the_simulation_peak__peak_between_chart_samples() -> None:
    # A chart step far coarser than the events: the peak instant is still on the chart.
    result = simulate(replace(README_BURST, chart_step=97.0))

    peak = chart_peak(result)
    assert peak is not None and (peak.backlog, peak.t) == (result.peak_backlog, result.peak_at)
    assert [s.t for s in result.chart] == sorted(s.t for s in result.chart)


@pytest.mark.parametrize(
    "field,value",
    [
        ("workers", 0),
        ("service_mean", 0.0),
        ("retry_rate", 1.0),
        ("arrival_rate", -1.0),
        ("step", 0.0),
        ("chart_step", 0.0),
    ],
)
def test_scenario_rejected__invalid_value(field: str, value: float) -> None:
    with pytest.raises(ValueError):
        replace(SEED_000, **cast(dict[str, Any], {field: value}))
