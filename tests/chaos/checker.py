"""The chaos checker: after the run drains, prove the promise held for every accepted job.

Checks (each failure is a `violation` with the job id, so the JobEvent trail can be read):
  1. every accepted job is finished in a state its kind allows (tests.kinds_chaos.EXPECTED);
  2. at most one applied ledger row per (job, input version, effect), and a succeeded job
     that sends a notice has exactly one applied `notice` row;
  3. the provider holds one notice per key (and one for every applied notice row, when its
     stats report `notices_by_key`); a key was requested more than once only when its ledger
     row was begun more than once (a pending/uncertain retry), and never more often than it
     was begun;
  4. no job has two terminal events; the trail is well-formed: each claim's generation is
     the previous claim's + 1, every other worker write carries the current generation, and
     the last event's state is the job's state;
  5. the run exercised the fences: duplicate deliveries + stale writes rejected > 0;
  6. follow-ups (FAN_OUT kinds): a succeeded parent has exactly the `n` children its input
     asked for plus one join, the ones its result names, its children keep its priority, and
     the join waited for exactly its siblings; a parent that did not succeed has none;
  7. with pruning on (`retention`, rows read with the soak's archive, tests.chaos.archive):
     every pruned job had ended (succeeded, failed, cancelled) and had been finished for the
     retention, and none went while a job that stayed longer named it (parent, replay of,
     dependency). Rules 1-6 read the pruned rows too. The pruners' `pruned_total` counter
     (by end state, what /metrics adds back to its totals) equals the archive's count of
     pruned jobs by state: it commits with the deletes, so a killed pruner counts nothing twice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.archive import Rows

FINISHED = {"succeeded", "quarantined", "cancelled", "failed"}
NOTICE_KINDS = {"chaos.notify", "chaos.flaky", "drill.notify", "drill.flaky"}
# jobs_claim's two reasons, and jobs_claim_many's (a batch message's claim).
CLAIM_REASONS = {"claimed", "took over expired lease", "claimed in a batch"}
# Parent kind -> (child kind, join kind) of tests.kinds_chaos's fan-out.
FAN_OUT = {"chaos.fan_out": ("chaos.notify", "chaos.join")}


@dataclass
class CheckReport:
    jobs: int = 0
    states: Counter[str] = field(default_factory=Counter)
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    signals: dict[str, int] = field(default_factory=dict)
    notices: int = 0
    provider_requests: int = 0
    keys_requested_more_than_once: int = 0
    effect_rows: int = 0
    effect_rows_retried: int = 0
    claims: int = 0
    takeovers: int = 0
    reconciler_requeues: int = 0
    max_attempt: int = 0
    pruned: dict[str, int] = field(default_factory=dict)  # rows pruned per table

    @property
    def ok(self) -> bool:
        return not self.violations

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "jobs": self.jobs,
            "states": dict(self.states),
            "by_kind": {k: dict(v) for k, v in self.by_kind.items()},
            "violations": self.violations[:50],
            "violation_count": len(self.violations),
            "signals": self.signals,
            "notices": self.notices,
            "provider_requests": self.provider_requests,
            "keys_requested_more_than_once": self.keys_requested_more_than_once,
            "effect_rows": self.effect_rows,
            "effect_rows_retried": self.effect_rows_retried,
            "claims": self.claims,
            "takeovers": self.takeovers,
            "reconciler_requeues": self.reconciler_requeues,
            "max_attempt": self.max_attempt,
            "pruned": self.pruned,
        }


def _check_states(
    report: CheckReport, jobs: list[Any], expected: dict[str, set[str]], accepted: set[str]
) -> None:
    seen = {str(job.pk) for job in jobs}
    for missing in sorted(accepted - seen):
        report.violations.append(f"accepted job {missing} has no row (lost acceptance)")
    for job in jobs:
        report.states[job.state] += 1
        report.by_kind.setdefault(job.kind, Counter())[job.state] += 1
        report.max_attempt = max(report.max_attempt, job.attempt)
        if job.state not in FINISHED:
            report.violations.append(f"job {job.pk} ({job.kind}) not finished: {job.state}")
        elif job.kind in expected and job.state not in expected[job.kind]:
            report.violations.append(
                f"job {job.pk} ({job.kind}) ended {job.state}, expected one of "
                f"{sorted(expected[job.kind])}: {job.error_category} {job.error_message[:120]}"
            )


def _check_trail(report: CheckReport, job: Any, events: list[Any]) -> None:
    terminal = [e for e in events if e.to_state in FINISHED]
    if len(terminal) > 1:
        report.violations.append(
            f"job {job.pk}: {len(terminal)} terminal events "
            f"({', '.join(f'{e.to_state}@g{e.generation}' for e in terminal)})"
        )
    current = 0
    report.reconciler_requeues += sum(1 for e in events if e.actor == "reconciler")
    for event in events:
        is_claim = event.to_state == "leased" and event.reason in CLAIM_REASONS
        if is_claim:
            report.claims += 1
            report.takeovers += event.from_state == "leased"
            if event.generation != current + 1:
                report.violations.append(
                    f"job {job.pk}: claim generation {event.generation} after {current}"
                )
            current = event.generation
        elif event.from_state == "leased" and event.generation != current:
            report.violations.append(
                f"job {job.pk}: {event.from_state}->{event.to_state} by generation "
                f"{event.generation} while generation {current} held it (stale write applied)"
            )
    if events and events[-1].to_state != job.state:
        report.violations.append(
            f"job {job.pk}: last event -> {events[-1].to_state} but state is {job.state}"
        )
    if current != job.generation:
        report.violations.append(
            f"job {job.pk}: generation {job.generation} but claims reached {current}"
        )


def _check_effects(
    report: CheckReport, jobs: list[Any], rows: list[Any], provider: dict[str, Any] | None
) -> None:
    report.effect_rows = len(rows)
    by_job: dict[str, list[Any]] = defaultdict(list)
    applied: Counter[tuple[str, int, str]] = Counter()
    for row in rows:
        by_job[str(row.job_id)].append(row)
        if row.state == "applied":
            applied[(str(row.job_id), row.input_version, row.name)] += 1
        report.effect_rows_retried += row.calls > 1
    for effect, count in applied.items():
        if count > 1:
            report.violations.append(f"effect {effect} applied {count} times")
    for job in jobs:
        if job.state == "succeeded" and job.kind in NOTICE_KINDS:
            notices = [r for r in by_job[str(job.pk)] if r.name == "notice"]
            if len(notices) != 1 or notices[0].state != "applied":
                report.violations.append(
                    f"job {job.pk} succeeded without one applied notice "
                    f"({[(r.name, r.state) for r in notices]})"
                )
    if provider is None:
        return
    requests: dict[str, int] = provider.get("requests_by_key", {})
    report.notices = int(provider.get("notices", 0))
    report.provider_requests = sum(requests.values())
    report.keys_requested_more_than_once = sum(1 for n in requests.values() if n > 1)
    ledger = {row.idempotency_key: row for row in rows}
    for key, count in requests.items():
        entry = ledger.get(key)
        if entry is None:
            report.violations.append(f"provider got key {key} with no ledger row")
        elif count > entry.calls:
            report.violations.append(
                f"key {key}: {count} provider requests but the ledger began it {entry.calls} times "
                "(a call bypassed the ledger)"
            )
    _check_notices_held(report, rows, provider.get("notices_by_key"))
    notice_jobs = sum(1 for j in jobs if j.state == "succeeded" and j.kind in NOTICE_KINDS)
    if report.notices < notice_jobs:
        report.violations.append(
            f"{notice_jobs} notice jobs succeeded but the provider holds {report.notices} notices"
        )


def _check_notices_held(report: CheckReport, rows: list[Any], held: dict[str, int] | None) -> None:
    """Per key: the provider holds one notice, under a ledgered key, for every applied notice."""
    if held is None:  # a provider that does not report what it holds
        return
    ledgered = {row.idempotency_key for row in rows}
    for key, count in held.items():
        if count != 1:
            report.violations.append(f"provider holds {count} notices under key {key}")
        if key not in ledgered:
            report.violations.append(f"provider holds a notice under key {key} with no ledger row")
    for row in rows:
        sent = row.name == "notice" and row.state == "applied" and not row.local
        if sent and row.idempotency_key not in held:
            report.violations.append(
                f"effect {row.idempotency_key} applied but the provider holds no notice"
            )


def _check_follow_ups(report: CheckReport, jobs: list[Any], edges: list[tuple[str, str]]) -> None:
    by_parent: dict[str, list[Any]] = defaultdict(list)
    for job in jobs:
        if job.parent_id is not None:
            by_parent[str(job.parent_id)].append(job)
    waited: dict[str, set[str]] = defaultdict(set)
    for waiter, dependency in edges:
        waited[waiter].add(dependency)
    for parent in (job for job in jobs if job.kind in FAN_OUT):
        child_kind, join_kind = FAN_OUT[parent.kind]
        follow_ups = by_parent[str(parent.pk)]
        if parent.state != "succeeded":
            if follow_ups:
                report.violations.append(
                    f"job {parent.pk} ended {parent.state} with {len(follow_ups)} follow-ups"
                )
            continue
        children = {str(j.pk) for j in follow_ups if j.kind == child_kind}
        joins = [str(j.pk) for j in follow_ups if j.kind == join_kind]
        result = parent.result or {}
        if len(children) != int(parent.input["n"]) or children != set(result.get("children", [])):
            report.violations.append(
                f"job {parent.pk}: {len(children)} children, asked for {parent.input['n']} "
                f"({sorted(children)} vs result {result.get('children')})"
            )
        if joins != [result.get("join")] or len(follow_ups) != len(children) + 1:
            report.violations.append(f"job {parent.pk}: joins {joins}, result {result}")
        elif waited[joins[0]] != children:
            report.violations.append(
                f"join {joins[0]} waited for {sorted(waited[joins[0]])}, not its siblings"
            )
        for child in (j for j in follow_ups if j.kind == child_kind):
            if child.priority != parent.priority:
                report.violations.append(
                    f"job {child.pk}: priority {child.priority}, its parent's {parent.priority}"
                )


def _check_pruning(
    report: CheckReport,
    jobs: list[Any],
    edges: list[tuple[str, str]],
    pruned: list[Any],
    retention: float,
) -> None:
    gone = {p.job_id: p for p in pruned}
    for p in pruned:
        if p.state not in FINISHED - {"quarantined"}:
            report.violations.append(f"job {p.job_id} pruned while {p.state}")
        elif p.finished_at is None or (p.pruned_at - p.finished_at).total_seconds() < retention - 1:
            report.violations.append(
                f"job {p.job_id} pruned {p.pruned_at} before its retention "
                f"({retention:g}s after {p.finished_at})"
            )
    # (referrer, referred): a referred job goes with its referrer or after it, never before.
    refs = [(str(j.pk), str(j.parent_id)) for j in jobs if j.parent_id is not None]
    refs += [(str(j.pk), str(j.replay_of_id)) for j in jobs if j.replay_of_id is not None]
    refs += edges
    for referrer, referred in refs:
        if referred not in gone:
            continue
        stays = gone.get(referrer)
        if stays is None or stays.pruned_at > gone[referred].pruned_at:
            report.violations.append(f"job {referred} pruned while job {referrer} still named it")


def check_run(
    *,
    accepted: set[str],
    expected: dict[str, set[str]],
    provider: dict[str, Any] | None,
    require_fences: bool = True,
    retention: float | None = None,
) -> CheckReport:
    """Run every check against the database (and the provider's /stats); see module doc."""
    from jobs.counters import (
        DUPLICATE_DELIVERIES,
        DUPLICATE_EFFECTS,
        EXPIRED_LEASES,
        PRUNED,
        STALE_WRITES_REJECTED,
        counter_values,
    )

    rows = Rows(archived=retention is not None)
    report = CheckReport()
    jobs = rows.jobs()
    report.jobs = len(jobs)
    _check_states(report, jobs, expected, accepted)
    events: dict[str, list[Any]] = defaultdict(list)
    for event in rows.events():
        events[str(event.job_id)].append(event)
    for job in jobs:
        _check_trail(report, job, events[str(job.pk)])
    _check_effects(report, jobs, rows.ledger(), provider)
    edges = rows.edges()
    _check_follow_ups(report, jobs, edges)
    values = counter_values()
    if retention is not None:
        report.pruned = rows.pruned_counts()
        pruned = rows.pruned()
        _check_pruning(report, jobs, edges, pruned, retention)
        counted = {label: n for (name, label), n in values.items() if name == PRUNED and n}
        if counted != dict(Counter(p.state for p in pruned)):
            report.violations.append(
                f"{PRUNED} {counted} is not the pruned jobs by state "
                f"{dict(Counter(p.state for p in pruned))}"
            )
    report.signals = {name: value for (name, label), value in values.items() if not label}
    duplicates = report.signals.get(DUPLICATE_DELIVERIES, 0)
    stale = report.signals.get(STALE_WRITES_REJECTED, 0)
    report.signals.setdefault(DUPLICATE_DELIVERIES, duplicates)
    report.signals.setdefault(STALE_WRITES_REJECTED, stale)
    report.signals.setdefault(EXPIRED_LEASES, 0)
    if report.signals.get(DUPLICATE_EFFECTS, 0):
        report.violations.append(f"{DUPLICATE_EFFECTS} = {report.signals[DUPLICATE_EFFECTS]}")
    if require_fences and duplicates == 0 and stale == 0:
        report.violations.append(
            "no duplicate delivery and no stale write was rejected: the run tested nothing"
        )
    return report


@dataclass
class ScheduleCheck:
    """One schedule after a run: its ticks' jobs, and what is wrong with them."""

    ticks: list[Any] = field(default_factory=list)  # the tick of each job, in order
    expected: list[Any] = field(default_factory=list)  # every tick it had to decide
    missed: int = 0
    violations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ticks": len(self.ticks), "expected": len(self.expected), "missed": self.missed}


def check_schedule(name: str, *, no_gap: bool, rows: Rows | None = None) -> ScheduleCheck:
    """No tick has two jobs, and every tick from the schedule's first cursor to its last one
    was run once or counted missed; with `no_gap` (its policy is `all`, or nothing was ever
    late enough to miss) none was missed. `rows`: where the jobs are read (the soak's
    archive too, with pruning on)."""
    from datetime import UTC, datetime
    from zoneinfo import ZoneInfo

    from jobs.models import Schedule, ScheduleEvent
    from jobs.ticks import ticks_between

    found = ScheduleCheck()
    row = Schedule.objects.filter(name=name).first()
    if row is None:
        found.violations.append(f"schedule {name} was never synced")
        return found
    created = ScheduleEvent.objects.get(schedule=row, action="created")
    first_cursor = datetime.fromisoformat(created.details["after"])
    prefix = f"schedule:{name}@"
    keys = (rows or Rows()).business_keys(prefix)
    found.ticks = sorted(
        datetime.strptime(str(k).removeprefix(prefix), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        for k in keys
    )
    zone = ZoneInfo(row.timezone)
    found.expected = list(
        ticks_between(row.cron, zone, after=first_cursor, until=row.decided_through)
    )
    found.missed = row.missed_ticks
    if len(found.ticks) != len(set(found.ticks)):
        found.violations.append(f"schedule {name}: a tick has two jobs")
    if not set(found.ticks) <= set(found.expected):
        found.violations.append(f"schedule {name}: a job for a tick outside its cursor")
    if row.submitted_ticks != len(found.ticks):
        found.violations.append(
            f"schedule {name}: {row.submitted_ticks} ticks counted submitted, "
            f"{len(found.ticks)} jobs"
        )
    if row.submitted_ticks + row.missed_ticks != len(found.expected):
        found.violations.append(
            f"schedule {name}: {row.submitted_ticks} submitted + {row.missed_ticks} missed "
            f"!= {len(found.expected)} ticks decided"
        )
    if no_gap and (found.missed or found.ticks != found.expected):
        found.violations.append(f"schedule {name}: ticks missed or a gap")
    return found
