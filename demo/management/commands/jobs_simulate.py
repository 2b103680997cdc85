"""Size workers before production: a capacity model of arrivals, bursts, retries (demo.simulate)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from demo.simulate import (
    Distribution,
    Result,
    Scenario,
    chart_peak,
    compare_retries,
    simulate,
    summary_lines,
)


@dataclass(frozen=True)
class HistoryCalibration:
    """What the job table says about real load over a window."""

    hours: float
    accepted: int
    arrival_rate: float  # jobs/s
    attempts: int
    service_mean: float | None  # seconds from claim to success, successful attempts only
    service_cv: float | None  # coefficient of variation of those times
    retry_rate: float  # failed attempts / attempts that ended


def job_history_calibration(*, hours: float) -> HistoryCalibration:
    """Selector: arrival rate, service time and failure rate from jobs and their events."""
    from jobs.models import Job, JobEvent

    since = timezone.now() - timedelta(hours=hours)
    accepted = Job.objects.filter(created_at__gte=since).count()
    claims = {
        (job_id, generation): at
        for job_id, generation, at in JobEvent.objects.filter(
            at__gte=since, to_state="leased"
        ).values_list("job_id", "generation", "at")
    }
    durations = [
        (at - claims[(job_id, generation)]).total_seconds()
        for job_id, generation, at in JobEvent.objects.filter(
            at__gte=since, from_state="leased", to_state="succeeded"
        ).values_list("job_id", "generation", "at")
        if (job_id, generation) in claims
    ]
    failed = JobEvent.objects.filter(
        at__gte=since, from_state="leased", to_state__in=["retry_wait", "quarantined"]
    ).count()
    ended = failed + len(durations)
    mean = sum(durations) / len(durations) if durations else None
    cv = None
    if mean and len(durations) > 1:
        variance = sum((d - mean) ** 2 for d in durations) / (len(durations) - 1)
        cv = math.sqrt(variance) / mean
    return HistoryCalibration(
        hours=hours,
        accepted=accepted,
        arrival_rate=accepted / (hours * 3600.0),
        attempts=len(claims),
        service_mean=mean,
        service_cv=cv,
        retry_rate=failed / ended if ended else 0.0,
    )


class Command(BaseCommand):
    help = (
        "Model backlog, oldest-job age and drain time for an arrival rate (with a burst), a "
        "service time distribution, a worker count and a retry rate; optionally calibrated "
        "from the job table. Prints a table, Little's law, the deadline verdict; --png charts it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--arrival-rate", type=float, default=1.0, help="jobs/s (default 1)")
        parser.add_argument("--burst-at", type=float, default=None, help="burst start, seconds")
        parser.add_argument("--burst-rate", type=float, default=0.0, help="jobs/s in the burst")
        parser.add_argument("--burst-duration", type=float, default=0.0, help="seconds")
        parser.add_argument(
            "--service",
            choices=[d.value for d in Distribution],
            default="exponential",
            help="service time distribution (default exponential)",
        )
        parser.add_argument("--service-mean", type=float, default=10.0, help="seconds (default 10)")
        parser.add_argument("--lognormal-sigma", type=float, default=0.5)
        parser.add_argument("--workers", type=int, default=12)
        parser.add_argument(
            "--retry-rate", type=float, default=0.0, help="fraction of attempts that fail, 0..1"
        )
        parser.add_argument("--max-retries", type=int, default=3)
        parser.add_argument("--retry-base-delay", type=float, default=1.0)
        parser.add_argument("--retry-max-delay", type=float, default=30.0)
        parser.add_argument("--step", type=float, default=60.0, help="table step, seconds")
        parser.add_argument(
            "--chart-step",
            type=float,
            default=None,
            help="chart sampling, seconds (default: fine, 600 points over --duration)",
        )
        parser.add_argument("--duration", type=float, default=3600.0, help="arrival window, s")
        parser.add_argument("--deadline", type=float, default=None, help="max accept->success, s")
        parser.add_argument("--horizon", type=float, default=None, help="give up draining at, s")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--png", type=Path, default=None, help="write a chart here")
        parser.add_argument(
            "--compare-retries",
            nargs="?",
            const="0,1,3,5,10",
            default=None,
            metavar="COUNTS",
            help="rerun with these max-retries (default 0,1,3,5,10) and compare useful throughput",
        )
        parser.add_argument(
            "--from-history",
            type=float,
            default=None,
            metavar="HOURS",
            help="calibrate arrival rate, service mean and retry rate from the last HOURS",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        console = Console(file=self.stdout, width=120, highlight=False, soft_wrap=True)  # type: ignore[arg-type]
        scenario = self._scenario(options, console)
        result = simulate(scenario)
        console.print(self._timeline(result))
        for line in summary_lines(result):
            console.print(line)
        if options["compare_retries"] is not None:
            console.print(self._comparison(scenario, options["compare_retries"]))
        if options["png"] is not None:
            write_chart(result, options["png"])
            console.print(f"chart written to {options['png']}")

    def _scenario(self, options: dict[str, Any], console: Console) -> Scenario:
        values = {
            "arrival_rate": options["arrival_rate"],
            "service_mean": options["service_mean"],
            "lognormal_sigma": options["lognormal_sigma"],
            "retry_rate": options["retry_rate"],
            "distribution": Distribution(options["service"]),
        }
        if options["from_history"] is not None:
            values.update(self._calibrated(options["from_history"], values, console))
        try:
            return Scenario(
                workers=options["workers"],
                duration=options["duration"],
                burst_at=options["burst_at"],
                burst_rate=options["burst_rate"],
                burst_duration=options["burst_duration"],
                max_retries=options["max_retries"],
                retry_base_delay=options["retry_base_delay"],
                retry_max_delay=options["retry_max_delay"],
                step=options["step"],
                chart_step=options["chart_step"],
                deadline=options["deadline"],
                horizon=options["horizon"],
                seed=options["seed"],
                **values,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    def _calibrated(self, hours: float, values: dict[str, Any], console: Console) -> dict[str, Any]:
        if hours <= 0:
            raise CommandError("--from-history needs a positive number of hours")
        history = job_history_calibration(hours=hours)
        if history.accepted == 0 or history.service_mean is None:
            raise CommandError(
                f"no usable history in the last {hours:g}h ({history.accepted} jobs accepted, "
                "no successful attempt): run some jobs first, or pass the rates by hand"
            )
        console.print(
            f"calibrated from the last {hours:g}h: {history.accepted} jobs -> arrival rate "
            f"{history.arrival_rate:.4f}/s, {history.attempts} attempts, service mean "
            f"{history.service_mean:.3f}s (cv {history.service_cv or 0:.2f}), retry rate "
            f"{history.retry_rate:.1%}"
        )
        calibrated: dict[str, Any] = {
            "arrival_rate": history.arrival_rate,
            "service_mean": max(history.service_mean, 1e-3),
            "retry_rate": min(history.retry_rate, 0.99),
        }
        if values["distribution"] is Distribution.LOGNORMAL and history.service_cv:
            # A lognormal with this coefficient of variation: sigma^2 = ln(1 + cv^2).
            calibrated["lognormal_sigma"] = math.sqrt(math.log(1 + history.service_cv**2))
        return calibrated

    def _timeline(self, result: Result) -> Table:
        table = Table(title="queue over time", show_edge=False)
        for name in (
            "t (s)",
            "arrival/s",
            "backlog",
            "waiting",
            "in service",
            "oldest age (s)",
            "completed",
            "quarantined",
        ):
            table.add_column(name, justify="right")
        scenario = result.scenario
        for sample in result.samples:
            table.add_row(
                f"{sample.t:.0f}",
                f"{scenario.rate_at(sample.t):g}",
                str(sample.backlog),
                str(sample.queued),
                str(sample.in_service),
                f"{sample.oldest_age:.0f}",
                str(sample.completed),
                str(sample.quarantined),
            )
        return table

    def _comparison(self, scenario: Scenario, counts_text: str) -> Table:
        try:
            counts = sorted({int(part) for part in counts_text.split(",") if part.strip()})
        except ValueError:
            raise CommandError("--compare-retries takes comma-separated integers") from None
        if not counts or min(counts) < 0:
            raise CommandError("--compare-retries takes non-negative integers")
        rows = compare_retries(scenario, counts)
        table = Table(
            title="more retries do not add capacity (same arrivals, same failures)",
            show_edge=False,
        )
        for name in (
            "max retries",
            "attempts",
            "useful completions",
            "quarantined",
            "useful/s during arrivals",
            "failed attempts",
            "p95 latency (s)",
            "drain (s)",
        ):
            table.add_column(name, justify="right")
        for row in rows:
            table.add_row(
                str(row.max_retries),
                str(row.attempts),
                str(row.completed),
                str(row.quarantined),
                f"{row.useful_throughput:.3f}",
                f"{row.wasted_fraction:.0%}",
                f"{row.p95_latency:.0f}",
                "-" if row.drain_time is None else f"{row.drain_time:.0f}",
            )
        table.caption = (
            f"useful capacity ceiling: {scenario.useful_capacity:.3f}/s "
            "= workers / service mean x (1 - retry rate). Retries spend capacity: they can turn "
            "failures into late successes below this ceiling, never raise it"
        )
        return table


def write_chart(result: Result, path: Path) -> None:
    """The chart (chart_figure) as a PNG."""
    import matplotlib.pyplot as plt

    fig = chart_figure(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def chart_figure(result: Result) -> Figure:
    """Backlog, oldest-job age and completions over time (matplotlib, Agg).

    Plots the simulation's fine timeline (`Result.chart`), not the table's rows: a coarse
    `--step` would hide the peak. The peak backlog is marked with its value and time, and the
    title says what the chart answers: the peak, the drain time and the deadline verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenario, chart = result.scenario, result.chart
    times = [s.t for s in chart]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.plot(times, [s.backlog for s in chart], label="backlog (unfinished jobs)")
    top.plot(times, [s.completed for s in chart], label="completed (cumulative)")
    peak = chart_peak(result)
    if peak is not None and peak.backlog > 0:
        top.plot([peak.t], [peak.backlog], "o", color="tab:red", label="peak backlog")
        top.annotate(
            f"peak {peak.backlog} jobs at t={peak.t:.0f}s",
            xy=(peak.t, peak.backlog),
            xytext=(8, -4),
            textcoords="offset points",
            va="top",
            fontsize="small",
        )
    top.set_ylabel("jobs")
    bottom.plot(times, [s.oldest_age for s in chart], color="tab:red", label="oldest job age")
    if scenario.deadline is not None:
        bottom.axhline(scenario.deadline, color="black", linestyle="--", label="deadline")
    bottom.set_ylabel("seconds")
    bottom.set_xlabel("time (s)")
    for axis in (top, bottom):
        if scenario.burst_at is not None and scenario.burst_duration > 0:
            axis.axvspan(
                scenario.burst_at,
                scenario.burst_at + scenario.burst_duration,
                color="orange",
                alpha=0.15,
                label="burst",
            )
        axis.axvline(scenario.duration, color="grey", linestyle=":", label="arrivals stop")
        axis.legend(loc="upper left", fontsize="small")
        axis.grid(alpha=0.3)
    fig.suptitle(chart_title(result), fontsize="medium")
    fig.tight_layout()
    return fig


def chart_title(result: Result) -> str:
    """Two lines: the scenario, then what it means (peak, drain time, deadline verdict)."""
    s = result.scenario
    burst = (
        f", burst {s.burst_rate:g}/s for {s.burst_duration:g}s at t={s.burst_at:g}s"
        if s.burst_at is not None and s.burst_duration > 0
        else ""
    )
    verdict = [f"peak backlog {result.peak_backlog} at t={result.peak_at:.0f}s"]
    verdict.append(
        f"drained {result.drain_time:.0f}s after the overload"
        if result.drain_time is not None
        else f"not drained by t={result.end_time:.0f}s"
    )
    if s.deadline is not None:
        verdict.append(
            f"deadline {s.deadline:g}s {'met' if result.deadline_met else 'MISSED'}"
            f" ({result.late_jobs} late)"
        )
    return (
        f"{s.workers} workers, {s.distribution.value} service mean {s.service_mean:g}s, "
        f"arrivals {s.arrival_rate:g}/s{burst}, retry rate {s.retry_rate:.0%}\n"
        + "; ".join(verdict)
    )


__all__ = [
    "Command",
    "HistoryCalibration",
    "chart_figure",
    "chart_title",
    "job_history_calibration",
    "write_chart",
]
