"""`manage.py jobs_simulate`: table, arithmetic, chart and comparison (no database needed)."""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO
from pathlib import Path
from typing import cast

import pytest
from django.core.management import CommandError, call_command


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobs_simulate", *args, stdout=out)
    return out.getvalue()


def test_prints_table_and_verdict__burst_with_deadline(tmp_path: Path) -> None:
    png = tmp_path / "chart.png"
    text = run(
        "--arrival-rate=1",
        "--service-mean=10",
        "--workers=12",
        "--burst-at=300",
        "--burst-rate=3",
        "--burst-duration=300",
        "--duration=1200",
        "--step=120",
        "--deadline=300",
        "--seed=3",
        f"--png={png}",
    )
    assert "queue over time" in text
    assert "Little's law: in service ~ lambda x W" in text
    assert "deadline 300s: MISSED" in text
    assert "drain time" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_comparison_shows_flat_useful_throughput__compare_retries() -> None:
    text = run(
        "--arrival-rate=1",
        "--service-mean=10",
        "--workers=8",
        "--retry-rate=0.2",
        "--duration=1200",
        "--step=600",
        "--compare-retries=0,3,10",
    )
    assert "more retries do not add capacity" in text
    assert "useful capacity ceiling: 0.640/s" in text


def test_same_output__same_seed() -> None:
    args = ("--arrival-rate=2", "--workers=25", "--duration=600", "--seed=5", "--step=100")
    assert run(*args) == run(*args)


@pytest.mark.parametrize(
    "args", [("--workers=0",), ("--retry-rate=1.5",), ("--compare-retries=a,b",)]
)
def test_readable_error__bad_option(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError):
        run("--duration=60", *args)


def test_chart_peak_equals_the_simulation_peak__what_is_drawn() -> None:
    import matplotlib.pyplot as plt

    from demo.management.commands.jobs_simulate import chart_figure
    from demo.simulate import Scenario, simulate

    result = simulate(
        Scenario(
            arrival_rate=1.0,
            service_mean=10.0,
            workers=12,
            duration=1800.0,
            burst_at=600.0,
            burst_rate=3.0,
            burst_duration=300.0,
            step=300.0,  # seven table rows: the chart must not be drawn from them
            deadline=900.0,
            seed=1,
        )
    )
    fig = chart_figure(result)
    try:
        top = fig.axes[0]
        lines = {line.get_label(): line for line in top.get_lines()}
        backlog = lines["backlog (unfinished jobs)"]
        # What was plotted: lists of numbers (matplotlib types them as any ArrayLike).
        xs = list(cast("Sequence[float]", backlog.get_xdata()))
        ys = list(cast("Sequence[float]", backlog.get_ydata()))
        marker = lines["peak backlog"]
        title = fig.texts[0].get_text() if fig.texts else ""
    finally:
        plt.close(fig)

    assert max(ys) == result.peak_backlog
    assert xs[ys.index(max(ys))] == result.peak_at
    marked = (
        list(cast("Sequence[float]", marker.get_xdata())),
        list(cast("Sequence[float]", marker.get_ydata())),
    )
    assert marked == (
        [result.peak_at],
        [result.peak_backlog],
    )
    assert len(xs) > 100
    assert f"peak backlog {result.peak_backlog} at t={result.peak_at:.0f}s" in title
    assert "deadline 900s" in title
