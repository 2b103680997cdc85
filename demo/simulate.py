"""A pure capacity model of the job queue: arrivals, workers, retries -> backlog over time.

Seed 001's experiment (a burst of arrivals above completion, then drain) with seed 000's
arithmetic (Little's law: in service ~ arrival rate x service time). No Django, no clock:
a discrete-event simulation driven by a seeded `random.Random`. The table's timeline is
sampled every `step` seconds; the chart's is sampled finely (`chart_step`) whatever the step,
and also holds the instant of the peak backlog, so a chart never misses the peak.

Model: jobs arrive as a Poisson process (base rate, plus a burst window). Each attempt holds
one worker for a service time drawn from the chosen distribution; with probability
`retry_rate` the attempt fails, and the job waits a full-jitter backoff before queueing again,
until `max_retries` retries are spent (then it is quarantined: no useful completion).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
from collections import deque
from dataclasses import dataclass, field, replace
from enum import StrEnum

CHART_POINTS = 600  # chart samples over the arrival window when no chart_step is given


class Distribution(StrEnum):
    FIXED = "fixed"  # every attempt takes exactly the mean
    EXPONENTIAL = "exponential"  # memoryless: many short attempts, a few long ones
    LOGNORMAL = "lognormal"  # long right tail, typical of real documents and renders


@dataclass(frozen=True)
class Scenario:
    """Everything a run depends on; two runs of one scenario give the same result."""

    arrival_rate: float  # jobs per second outside the burst
    service_mean: float  # seconds per attempt
    workers: int
    duration: float  # seconds during which jobs arrive
    distribution: Distribution = Distribution.EXPONENTIAL
    lognormal_sigma: float = 0.5
    burst_at: float | None = None  # seconds from the start
    burst_rate: float = 0.0  # jobs per second during the burst (replaces the base rate)
    burst_duration: float = 0.0
    retry_rate: float = 0.0  # fraction of attempts that fail transiently
    max_retries: int = 3
    retry_base_delay: float = 1.0
    retry_max_delay: float = 30.0
    step: float = 10.0  # sampling interval of the timeline (the table's rows)
    chart_step: float | None = None  # sampling interval of the chart; None: fine (see below)
    deadline: float | None = None  # longest acceptable accept->success latency, seconds
    horizon: float | None = None  # stop here even if not drained (default: 20 x duration)
    seed: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.arrival_rate < 0 or self.burst_rate < 0:
            problems.append("arrival rates must be >= 0")
        if self.service_mean <= 0:
            problems.append("service mean must be > 0")
        if self.workers < 1:
            problems.append("workers must be >= 1")
        if self.duration <= 0 or self.step <= 0:
            problems.append("duration and step must be > 0")
        if self.chart_step is not None and self.chart_step <= 0:
            problems.append("chart step must be > 0")
        if not 0 <= self.retry_rate < 1:
            problems.append("retry rate must be in [0, 1)")
        if self.max_retries < 0:
            problems.append("max retries must be >= 0")
        if self.burst_duration < 0 or (self.burst_at is not None and self.burst_at < 0):
            problems.append("burst start and duration must be >= 0")
        if self.lognormal_sigma <= 0:
            problems.append("lognormal sigma must be > 0")
        if problems:
            raise ValueError("; ".join(problems))

    def rate_at(self, t: float) -> float:
        """Arrival rate at time t (jobs/s)."""
        if t >= self.duration:
            return 0.0
        if self.burst_at is not None and self.burst_at <= t < self.burst_at + self.burst_duration:
            return self.burst_rate
        return self.arrival_rate

    @property
    def chart_interval(self) -> float:
        """The chart's sampling interval: `chart_step`, else CHART_POINTS over the arrival
        window (never coarser than the table's step)."""
        if self.chart_step is not None:
            return self.chart_step
        return min(self.step, self.duration / CHART_POINTS)

    @property
    def capacity(self) -> float:
        """Attempts per second the workers can finish."""
        return self.workers / self.service_mean

    @property
    def useful_capacity(self) -> float:
        """Successful attempts per second at full utilisation: failed attempts use capacity too."""
        return self.capacity * (1.0 - self.retry_rate)

    @property
    def mean_arrival_rate(self) -> float:
        burst = 0.0
        if self.burst_at is not None:
            start = min(self.burst_at, self.duration)
            end = min(self.burst_at + self.burst_duration, self.duration)
            burst = max(end - start, 0.0)
        return (
            self.arrival_rate * (self.duration - burst) + self.burst_rate * burst
        ) / self.duration


@dataclass(frozen=True)
class Sample:
    """The state of the queue at one sampling instant."""

    t: float
    arrived: int  # cumulative
    backlog: int  # accepted, not finished (queued + in retry wait + in service)
    queued: int  # waiting for a worker now
    in_service: int
    oldest_age: float  # age of the oldest unfinished job, seconds
    completed: int  # cumulative useful completions
    quarantined: int  # cumulative


@dataclass
class Result:
    scenario: Scenario
    samples: list[Sample] = field(default_factory=list)  # every `step` seconds (the table)
    chart: list[Sample] = field(default_factory=list)  # every `chart_step`, plus the peak
    accepted: int = 0
    completed: int = 0
    quarantined: int = 0
    attempts: int = 0
    busy_seconds: float = 0.0  # worker-seconds spent in service (area under in-service)
    system_seconds: float = 0.0  # job-seconds spent in the system (area under backlog)
    end_time: float = 0.0
    drained: bool = False
    latencies: list[float] = field(default_factory=list)  # accept -> success, per success
    attempt_times: list[float] = field(default_factory=list)  # service time of each attempt
    peak_backlog: int = 0
    peak_at: float = 0.0
    peak: Sample | None = None  # the queue right after the event that set the peak backlog
    drain_time: float | None = None  # from the end of the overload until nobody waits

    @property
    def mean_service(self) -> float:
        return sum(self.attempt_times) / len(self.attempt_times) if self.attempt_times else 0.0

    @property
    def observed_arrival_rate(self) -> float:
        return self.accepted / self.scenario.duration

    @property
    def littles_law_in_service(self) -> float:
        """Seed 000's estimate: attempts per second x mean service time."""
        return (self.attempts / self.end_time) * self.mean_service if self.end_time else 0.0

    @property
    def measured_in_service(self) -> float:
        """Time-averaged number of jobs in service over the run."""
        return self.busy_seconds / self.end_time if self.end_time else 0.0

    @property
    def measured_in_system(self) -> float:
        return self.system_seconds / self.end_time if self.end_time else 0.0

    @property
    def useful_throughput(self) -> float:
        """Useful completions per second over the run."""
        return self.completed / self.end_time if self.end_time else 0.0

    def latency_quantile(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    @property
    def max_latency(self) -> float:
        return max(self.latencies, default=0.0)

    @property
    def late_jobs(self) -> int:
        deadline = self.scenario.deadline
        if deadline is None:
            return 0
        return sum(1 for latency in self.latencies if latency > deadline)

    @property
    def deadline_met(self) -> bool | None:
        """None without a deadline; else every job finished, none late."""
        if self.scenario.deadline is None:
            return None
        return self.drained and self.quarantined == 0 and self.late_jobs == 0


@dataclass
class _Job:
    accepted_at: float
    retries: int = 0


def _service_time(scenario: Scenario, rng: random.Random) -> float:
    mean = scenario.service_mean
    if scenario.distribution is Distribution.FIXED:
        return mean
    if scenario.distribution is Distribution.EXPONENTIAL:
        return rng.expovariate(1.0 / mean)
    sigma = scenario.lognormal_sigma
    # E[lognormal] = exp(mu + sigma^2/2): pick mu so the mean is the requested one.
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2.0, sigma)


def _arrival_times(scenario: Scenario, rng: random.Random) -> list[float]:
    """Poisson arrivals with a piecewise-constant rate (base, burst, base)."""
    cuts = {0.0, scenario.duration}
    if scenario.burst_at is not None:
        cuts |= {
            min(scenario.burst_at, scenario.duration),
            min(scenario.burst_at + scenario.burst_duration, scenario.duration),
        }
    edges = sorted(cuts)
    times: list[float] = []
    for start, end in itertools.pairwise(edges):
        rate = scenario.rate_at(start)
        if rate <= 0 or end <= start:
            continue
        t = start + rng.expovariate(rate)
        while t < end:
            times.append(t)
            t += rng.expovariate(rate)
    return times


@dataclass
class _Timeline:
    """Samples every `step` seconds, at i x step (no drift from adding up floats)."""

    step: float
    samples: list[Sample]
    index: int = 0

    @property
    def next_t(self) -> float:
        return self.index * self.step

    def take(self, sample: Sample) -> None:
        self.samples.append(sample)
        self.index += 1


# Event kinds, ordered so that at equal times completions free workers before arrivals queue.
_COMPLETE, _RETRY_READY, _ARRIVE = 0, 1, 2


class _Simulation:
    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        # Separate streams (common random numbers): the n-th attempt gets the same service
        # time and the same fail/succeed draw in every variant of a scenario, so comparisons
        # (e.g. more retries) differ only by the policy, not by luck.
        self.arrivals_rng = random.Random(f"{scenario.seed}:arrivals")
        self.service_rng = random.Random(f"{scenario.seed}:service")
        self.failure_rng = random.Random(f"{scenario.seed}:failure")
        self.jitter_rng = random.Random(f"{scenario.seed}:jitter")
        self.overload_end = _overload_end(scenario)
        self.result = Result(scenario=scenario)
        self.events: list[tuple[float, int, int, _Job]] = []
        self.counter = 0
        self.queue: deque[_Job] = deque()
        self.unfinished: dict[int, _Job] = {}
        self.free = scenario.workers
        self.now = 0.0
        self.last = 0.0
        self.drained_at: float | None = None

    def push(self, t: float, kind: int, job: _Job) -> None:
        self.counter += 1
        heapq.heappush(self.events, (t, kind, self.counter, job))

    def advance(self, t: float) -> None:
        """Accumulate the areas under in-service and backlog up to time t."""
        dt = t - self.last
        self.result.busy_seconds += dt * (self.s.workers - self.free)
        self.result.system_seconds += dt * len(self.unfinished)
        self.last = t

    def start_work(self) -> None:
        while self.free and self.queue:
            job = self.queue.popleft()
            self.free -= 1
            duration = _service_time(self.s, self.service_rng)
            self.result.attempts += 1
            self.result.attempt_times.append(duration)
            self.push(self.now + duration, _COMPLETE, job)

    def complete(self, job: _Job) -> None:
        self.free += 1
        if self.failure_rng.random() >= self.s.retry_rate:
            self.result.completed += 1
            self.result.latencies.append(self.now - job.accepted_at)
            self.unfinished.pop(id(job))
        elif job.retries < self.s.max_retries:
            job.retries += 1
            ceiling = min(self.s.retry_max_delay, self.s.retry_base_delay * 2 ** (job.retries - 1))
            self.push(self.now + self.jitter_rng.uniform(0.0, ceiling), _RETRY_READY, job)
        else:
            self.result.quarantined += 1
            self.unfinished.pop(id(job))

    def sample(self, t: float) -> Sample:
        # Jobs are accepted in time order and a dict keeps insertion order: the first
        # unfinished job is the oldest (O(1), so the peak can be sampled at every new high).
        oldest = next(iter(self.unfinished.values())).accepted_at if self.unfinished else t
        return Sample(
            t=t,
            arrived=self.result.accepted,
            backlog=len(self.unfinished),
            queued=len(self.queue),
            in_service=self.s.workers - self.free,
            oldest_age=t - oldest,
            completed=self.result.completed,
            quarantined=self.result.quarantined,
        )

    def sample_until(self, limit: float, timelines: list[_Timeline]) -> None:
        """Sample every timeline at each of its instants up to `limit`, in time order."""
        while True:
            t = min(timeline.next_t for timeline in timelines)
            if t > limit or not (t <= self.s.duration or self.unfinished or self.events):
                return
            self.advance(t)
            sample = self.sample(t)
            for timeline in timelines:
                if timeline.next_t == t:
                    timeline.take(sample)

    def run(self) -> Result:
        s, result = self.s, self.result
        for t in _arrival_times(s, self.arrivals_rng):
            self.push(t, _ARRIVE, _Job(accepted_at=t))
        horizon = s.horizon if s.horizon is not None else 20.0 * s.duration
        timelines = [_Timeline(s.step, result.samples), _Timeline(s.chart_interval, result.chart)]
        while True:
            upcoming = self.events[0][0] if self.events else math.inf
            self.sample_until(min(upcoming, horizon), timelines)
            if not self.events or upcoming > horizon:
                break
            t, kind, _, job = heapq.heappop(self.events)
            self.advance(t)
            self.now = t
            if kind == _ARRIVE:
                result.accepted += 1
                self.unfinished[id(job)] = job
                self.queue.append(job)
            elif kind == _RETRY_READY:
                self.queue.append(job)
            else:
                self.complete(job)
            self.start_work()
            if len(self.unfinished) > result.peak_backlog:
                result.peak_backlog, result.peak_at = len(self.unfinished), t
                result.peak = self.sample(t)
            if self.drained_at is None and t >= self.overload_end and self.waiting() == 0:
                self.drained_at = t
        result.drained = not self.unfinished
        result.end_time = max(self.now, s.duration) if result.drained else horizon
        self.advance(result.end_time)
        for timeline in (result.samples, result.chart):
            if not timeline or timeline[-1].t < result.end_time:
                timeline.append(self.sample(result.end_time))
        if result.peak is not None:
            # After any sample at the same instant: those were taken before the event.
            bisect.insort_right(result.chart, result.peak, key=lambda sample: sample.t)
        if self.drained_at is None and result.drained:
            self.drained_at = max(result.end_time, self.overload_end)
        if self.drained_at is not None:
            result.drain_time = self.drained_at - self.overload_end
        return result

    def waiting(self) -> int:
        """Jobs accepted and not in service: queued for a worker or waiting out a backoff."""
        return len(self.unfinished) - (self.s.workers - self.free)


def _overload_end(s: Scenario) -> float:
    """When demand drops back: the end of the burst, or the end of arrivals without one."""
    if s.burst_at is not None and s.burst_duration > 0:
        return min(s.burst_at + s.burst_duration, s.duration)
    return s.duration


def simulate(scenario: Scenario) -> Result:
    """Run the scenario to drain (or to its horizon) and return the timelines and totals."""
    return _Simulation(scenario).run()


def chart_peak(result: Result) -> Sample | None:
    """The highest backlog the chart's timeline shows (the earliest, on a tie)."""
    return max(result.chart, key=lambda sample: sample.backlog, default=None)


@dataclass(frozen=True)
class RetryComparison:
    max_retries: int
    attempts: int
    completed: int
    quarantined: int
    useful_throughput: float  # useful completions per second while jobs arrive
    wasted_fraction: float  # share of attempts that failed
    p95_latency: float
    drain_time: float | None


def compare_retries(scenario: Scenario, retry_counts: list[int]) -> list[RetryComparison]:
    """The same arrivals and failures with more retries: useful throughput does not grow.

    Throughput is measured over the arrival window (a fixed clock), so the comparison asks
    "how many customer jobs succeeded per second while demand was there".
    """
    rows = []
    for count in retry_counts:
        result = simulate(replace(scenario, max_retries=count))
        window_completed = _completed_by(result, scenario.duration)
        failed = result.attempts - result.completed
        rows.append(
            RetryComparison(
                max_retries=count,
                attempts=result.attempts,
                completed=result.completed,
                quarantined=result.quarantined,
                useful_throughput=window_completed / scenario.duration,
                wasted_fraction=failed / result.attempts if result.attempts else 0.0,
                p95_latency=result.latency_quantile(0.95),
                drain_time=result.drain_time,
            )
        )
    return rows


def _completed_by(result: Result, t: float) -> int:
    done = 0
    for sample in result.samples:
        if sample.t > t:
            break
        done = sample.completed
    return done


def summary_lines(result: Result) -> list[str]:
    """The arithmetic, in words: capacity, utilisation, Little's law, drain, deadline."""
    s = result.scenario
    rho = s.mean_arrival_rate / s.useful_capacity if s.useful_capacity else math.inf
    lines = [
        f"capacity: {s.workers} workers / {s.service_mean:g}s = {s.capacity:.3f} attempts/s; "
        f"useful at retry rate {s.retry_rate:.0%}: {s.useful_capacity:.3f}/s",
        f"mean arrival rate {s.mean_arrival_rate:.3f}/s -> utilisation {rho:.0%}"
        + (
            f", burst {s.burst_rate:g}/s is {s.burst_rate / s.useful_capacity:.0%} "
            "of useful capacity"
            if s.burst_at is not None and s.useful_capacity
            else ""
        ),
        f"Little's law: in service ~ lambda x W = {result.attempts / result.end_time:.3f}/s x "
        f"{result.mean_service:.2f}s = {result.littles_law_in_service:.2f} "
        f"(measured {result.measured_in_service:.2f})",
        f"accepted {result.accepted}, completed {result.completed}, quarantined "
        f"{result.quarantined}, attempts {result.attempts}",
        f"peak backlog {result.peak_backlog} at t={result.peak_at:.0f}s; "
        + (
            f"drain time {result.drain_time:.0f}s"
            if result.drain_time is not None
            else f"NOT drained by t={result.end_time:.0f}s"
        ),
        f"latency accept->success: p50 {result.latency_quantile(0.5):.1f}s, "
        f"p95 {result.latency_quantile(0.95):.1f}s, max {result.max_latency:.1f}s",
    ]
    if s.deadline is not None:
        verdict = "MET" if result.deadline_met else "MISSED"
        lines.append(
            f"deadline {s.deadline:g}s: {verdict} ({result.late_jobs} late, "
            f"{result.quarantined} quarantined, drained={result.drained})"
        )
    return lines
