"""Targets, the console summary and docs/benchmarks.md, from the results of one run."""

from __future__ import annotations

import math
from typing import Any

TARGET_E2E_VS_RAW = 1.0  # issue 16 (was 0.6)
TARGET_E2E_VS_PROCRASTINATE = 1.5
TARGET_START_OVER_RAW_MS = 1.5  # issue 28: idle accept->start p50 <= raw call->start p50 + this
TARGET_START_P99_MS = 25.0
TARGET_BACKLOG_VS_RAW = 3.0
TARGET_PG_MS_PER_JOB = 0.6
TARGET_COMMITS_PER_JOB = 1.2
TARGET_SUBMIT_MANY = 10.0


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets that this run measured, each with PASS/FAIL."""
    out: list[dict[str, Any]] = []
    e2e = results.get("e2e", {}).get("by_concurrency", {})
    for c, entry in e2e.items():
        ratio = entry["ratio_vs_raw"]
        out.append(
            {
                "name": f"durable e2e >= {TARGET_E2E_VS_RAW}x raw Celery (c={c})",
                "value": f"{ratio:.2f}x",
                "ok": ratio >= TARGET_E2E_VS_RAW,
            }
        )
        if "ratio_vs_procrastinate" in entry:
            ratio = entry["ratio_vs_procrastinate"]
            out.append(
                {
                    "name": f"durable e2e >= {TARGET_E2E_VS_PROCRASTINATE}x Procrastinate (c={c})",
                    "value": f"{ratio:.2f}x",
                    "ok": ratio >= TARGET_E2E_VS_PROCRASTINATE,
                }
            )
    for c, entry in e2e.items():
        out += _database_targets(f"e2e, single submits from 4 threads, c={c}", entry["durable"])
    backlog = results.get("backlog", {}).get("by_concurrency", {})
    variants = (
        ("durable", "ratio_vs_raw", "stats before the burst"),
        ("durable_analyzed", "ratio_analyzed_vs_raw", "stats after the burst"),
    )
    for c, entry in backlog.items():
        for name, ratio_key, stats in variants:
            if name not in entry:
                continue
            ratio = entry[ratio_key]
            out.append(
                {
                    "name": f"backlog drain >= {TARGET_BACKLOG_VS_RAW:.0f}x raw Celery "
                    f"(c={c}, {stats})",
                    "value": f"{ratio:.2f}x",
                    "ok": ratio >= TARGET_BACKLOG_VS_RAW,
                }
            )
            row = {
                "postgres_ms_per_job": entry[name]["cpu_ms_per_job"]["postgres"],
                "db_commits_per_job": entry[name]["db_commits_per_job"],
            }
            out += _database_targets(f"backlog drain with submit_many, c={c}, {stats}", row)
    many = results.get("submitmany")
    if many:
        ratio = many["ratio_submit_many_vs_single"]
        out.append(
            {
                "name": f"submit_many of {many['jobs']:,} jobs >= {TARGET_SUBMIT_MANY:.0f}x "
                "single submits (jobs/s)",
                "value": f"{ratio:.2f}x",
                "ok": ratio >= TARGET_SUBMIT_MANY,
            }
        )
    latency = results.get("latency")
    if latency:
        out += _latency_targets(latency)
    serial = results.get("serial")
    if serial:
        ratio = serial["ratio_keys_vs_none"]
        out.append(
            {
                "name": "serialization keys over many keys >= 0.8x no keys",
                "value": f"{ratio:.2f}x",
                "ok": ratio >= 0.8,
            }
        )
    if results.get("slowlink"):
        from bench import slowlink_report

        out += slowlink_report.targets(results["slowlink"])
    if results.get("priority"):
        from bench import priority_report

        out += priority_report.targets(results["priority"])
    if results.get("scale"):
        from bench import scale_report

        out += scale_report.targets(results["scale"])
    if results.get("statements"):
        from bench import statements_report

        out += statements_report.targets(results["statements"])
    return out


def _database_targets(where: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """PostgreSQL CPU and commits per job, submit included, of one measured durable row."""
    out = []
    pg = row.get("postgres_ms_per_job")
    if pg is not None:
        out.append(
            {
                "name": f"PostgreSQL CPU <= {TARGET_PG_MS_PER_JOB} ms/job ({where})",
                "value": f"{pg:.3f} ms",
                "ok": pg <= TARGET_PG_MS_PER_JOB,
            }
        )
    commits = row.get("db_commits_per_job")
    if commits is not None:
        out.append(
            {
                "name": f"DB commits <= {TARGET_COMMITS_PER_JOB}/job ({where})",
                "value": f"{commits:.2f}",
                "ok": commits <= TARGET_COMMITS_PER_JOB,
            }
        )
    return out


def _serial_table(serial: dict[str, Any]) -> list[str]:
    lines = [
        "### 7. Serialization keys over many keys vs none",
        "",
        f"The same no-op load, {serial['jobs_per_round']} jobs per round, {serial['rounds']} "
        f"rounds interleaved, one worker at concurrency {serial['worker_concurrency']}; keys "
        f"`doc:0..{serial['keys'] - 1}` (admission lock + head check at submit, hand-over on "
        "completion).",
        "",
        "| load | jobs/s (median) |",
        "|---|---:|",
        f"| no serialization key | {_f(serial['no_keys_jobs_per_s'])} |",
        f"| {serial['keys']} serialization keys | {_f(serial['many_keys_jobs_per_s'])} |",
        "",
        f"Ratio keys / no keys: **{serial['ratio_keys_vs_none']:.2f}x** (target >= 0.8x).",
        "",
    ]
    per_message = serial.get("jobs_per_message")
    if per_message:
        lines[-1:-1] = [
            f"Jobs per broker message: no keys {per_message['no_keys']:.2f}, keys "
            f"{per_message['many_keys']:.2f}.",
            "",
        ]
    return lines


def _tables(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    sub = results.get("submit")
    if sub:
        lines += [
            "### 1. Submit (no workers; one call = one transaction)",
            "",
            f"{sub['jobs_per_round']} calls per contender per round, {sub['rounds']} rounds, "
            "interleaved.",
            "",
            "| call | calls/s (median of rounds) | p50 ms | p99 ms |",
            "|---|---:|---:|---:|",
        ]
        names = {
            "submit_fast": "`jobs.submit` (fast path on: commit + publish + mark)",
            "submit_relay_only": "`jobs.submit` (fast path off: commit only)",
            "delay": "bare `task.delay()` (raw Celery no-op)",
        }
        for key, label in names.items():
            row = sub[key]
            lines.append(
                f"| {label} | {_f(row['jobs_per_s'])} | {_f(row['p50_ms'], 2)} | "
                f"{_f(row['p99_ms'], 2)} |"
            )
        lines += [
            "",
            f"Ratio `jobs.submit` (fast path) / `task.delay()`: "
            f"**{sub['ratio_submit_fast_vs_delay']:.2f}x** (median of per-round ratios). "
            f"The fast-path publish after commit takes p50 {_f(sub['fast_path_publish_ms_p50'], 2)}"
            f" ms / p99 {_f(sub['fast_path_publish_ms_p99'], 2)} ms per row.",
            "",
        ]
    if results.get("submitmany"):
        lines += _submit_many_table(results["submitmany"])
    relay = results.get("relay")
    lat = results.get("latency")
    if relay or lat:
        lines += ["### 2. Relay", ""]
    if relay:
        lines += [
            f"- Batch relay (`outbox.relay.outbox_relay_batch`, batch {relay['batch_size']}) on "
            f"a backlog of {relay['backlog_rows']} rows: **{_f(relay['rows_per_s'])} rows/s** "
            f"(rounds: {', '.join(_f(x) for x in relay['rounds'])}).",
        ]
    if lat:
        lines += [
            "",
            f"Commit -> marked published (outbox `published_at - created_at`), "
            f"{lat['jobs_per_mode']} paced submits per mode (80-160 ms apart, below the "
            "workers' capacity), rounds of the modes interleaved. The fast path publishes at "
            "once but writes `published_at` with its batched marks (`outbox/marks.py`, every "
            f"`OUTBOX_MARK_INTERVAL` = {lat.get('mark_interval_s', 0.25) * 1000:.0f} ms), so "
            "its figure is the mark's delay, not the "
            "publish's: table 5 has the start of the job.",
            "",
            "| mode | p50 ms | p99 ms |",
            "|---|---:|---:|",
            f"| fast path (on-commit publish) | {_f(lat['fast']['commit_to_publish_p50_ms'], 2)}"
            f" | {_f(lat['fast']['commit_to_publish_p99_ms'], 2)} |",
            f"| relay loop alone (`outbox_relay --loop --interval {lat['relay_interval_s']}`) | "
            f"{_f(lat['relay_only']['commit_to_publish_p50_ms'], 2)} | "
            f"{_f(lat['relay_only']['commit_to_publish_p99_ms'], 2)} |",
            "",
        ]
    e2e = results.get("e2e")
    if e2e:
        lines += [
            "### 3-4. End to end: durable vs raw Celery vs Procrastinate",
            "",
            f"Each round: submit {e2e['jobs_per_round']} no-op jobs from "
            f"{e2e.get('submitters', 1)} driver threads and "
            "stop the clock at the last ack (durable and Celery: the Redis `HDEL` of kombu's "
            "unacked entry; Procrastinate: the last row `succeeded`). "
            f"{e2e['rounds']} rounds per contender, order rotated every round.",
            "",
            "| workers | durable jobs/s | raw Celery jobs/s | Procrastinate jobs/s | "
            "durable / raw | durable / Procrastinate | DB commits/job (durable) | "
            "DB commits/job (Procrastinate) | broker cmds/job durable | broker cmds/job raw |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for c, entry in e2e["by_concurrency"].items():
            proc = entry.get("procrastinate", {})
            lines.append(
                f"| {c} | {_f(entry['durable']['jobs_per_s'])} | "
                f"{_f(entry['raw_celery']['jobs_per_s'])} | {_f(proc.get('jobs_per_s'))} | "
                f"**{entry['ratio_vs_raw']:.2f}x** | "
                f"{_f(entry.get('ratio_vs_procrastinate'), 2)}x | "
                f"{_f(entry['durable']['db_commits_per_job'], 2)} | "
                f"{_f(proc.get('db_commits_per_job'), 2)} | "
                f"{_f(entry['durable']['broker_commands_per_job'], 1)} | "
                f"{_f(entry['raw_celery']['broker_commands_per_job'], 1)} |"
            )
        proposal = [(c, e) for c, e in e2e["by_concurrency"].items() if "durable_reuse" in e]
        if proposal:
            lines += [
                "",
                "Proposal measured in the same rounds (not the shipped configuration): the "
                "durable worker keeping its database connection between tasks "
                "(`bench/reuse_app.py`: `CELERY_DB_REUSE_MAX` set, Django's "
                "`close_old_connections()` per task instead of Celery's unconditional close).",
                "",
                "| workers | durable+reuse jobs/s | / raw Celery | DB commits/job |",
                "|---:|---:|---:|---:|",
            ]
            for c, entry in proposal:
                lines.append(
                    f"| {c} | {_f(entry['durable_reuse']['jobs_per_s'])} | "
                    f"{entry['ratio_reuse_vs_raw']:.2f}x | "
                    f"{_f(entry['durable_reuse']['db_commits_per_job'], 2)} |"
                )
        lines += _e2e_postgres_table(e2e)
        lines += ["", "Per-round throughput (jobs/s):", ""]
        for c, entry in e2e["by_concurrency"].items():
            parts = [
                f"{name} {entry[name]['rounds']}"
                for name in ("durable", "raw_celery", "procrastinate", "durable_reuse")
                if name in entry
            ]
            lines.append(f"- c={c}: " + "; ".join(parts))
        lines.append("")
    cpu = results.get("cpu")
    if cpu or results.get("backlog"):
        lines += _cpu_table(cpu, results.get("backlog"))
    calls = results.get("calls")
    if calls:
        lines += _calls_table(calls, cpu)
    if results.get("statements"):
        from bench import statements_report

        lines += [*statements_report.table(results["statements"]), ""]
    if lat:
        lines += _latency_table(lat)
    if results.get("scale"):
        from bench import scale_report

        lines += [*scale_report.table(results["scale"]), ""]
    if results.get("serial"):
        lines += _serial_table(results["serial"])
    if results.get("backlog"):
        lines += _backlog_table(results["backlog"])
    if results.get("slowlink"):
        from bench import slowlink_report

        lines += slowlink_report.table(results["slowlink"])
    if results.get("priority"):
        from bench import priority_report

        lines += priority_report.table(results["priority"])
    if results.get("storage"):
        from bench import storage_report

        lines += storage_report.table(results["storage"])
    return lines


def _submit_many_table(many: dict[str, Any]) -> list[str]:
    chunk = many["chunk"]
    labels = {
        "submit_many": f"one `jobs.submit_many` call of {many['jobs']:,} requests",
        "submit_many_chunks": f"`jobs.submit_many` calls of {chunk:,} requests",
        "single": f"{many['jobs']:,} `jobs.submit` calls",
    }
    lines = [
        "### 1b. `jobs.submit_many` vs single submits (`bench/backlog.py`)",
        "",
        f"{many['jobs']:,} no-op jobs per contender per round from one driver thread, no "
        f"workers, fast path on (the default: each commit publishes its rows at once, packed "
        f"into batch messages), {many['rounds']} rounds interleaved, each from empty job "
        "tables. PostgreSQL: CPU of the bench database's backends (`bench/pgcpu.py`).",
        "",
        "| contender | jobs/s (median) | per round | PostgreSQL CPU ms/job |",
        "|---|---:|---|---:|",
    ]
    for key, label in labels.items():
        row = many[key]
        lines.append(
            f"| {label} | {_f(row['jobs_per_s'])} | {row['rounds']} | "
            f"{_f(row['postgres_ms_per_job'], 3)} |"
        )
    lines += [
        "",
        f"Ratio one `submit_many` call / single submits: "
        f"**{many['ratio_submit_many_vs_single']:.2f}x**; calls of {chunk:,}: "
        f"{many['ratio_submit_many_chunks_vs_single']:.2f}x (median of per-round ratios; "
        f"target >= {TARGET_SUBMIT_MANY:.0f}x).",
        "",
    ]
    return lines


def _e2e_postgres_table(e2e: dict[str, Any]) -> list[str]:
    rows = [
        (c, e) for c, e in e2e["by_concurrency"].items() if "postgres_ms_per_job" in e["durable"]
    ]
    if not rows:
        return []
    lines = [
        "",
        "PostgreSQL per job in the same rounds, submit included: on-CPU time of the backends "
        "of the contender's own database (`bench/pgcpu.py`) over its rounds, divided by the "
        "jobs; jobs/s per PostgreSQL core = 1,000 / that. Commits: `xact_commit` over the "
        "block, as above. Jobs/message: jobs per broker message (LPUSH), > 1 when the fast "
        "path's publisher packed rows of concurrent submits into batch messages "
        "(`outbox/fastpath.py`).",
        "",
        "| workers | durable PG CPU ms/job | durable jobs/s per PG core | durable commits/job "
        "| durable jobs/message | Procrastinate PG CPU ms/job | Procrastinate jobs/s per PG "
        "core |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c, entry in rows:
        durable, proc = entry["durable"], entry.get("procrastinate", {})
        lines.append(
            f"| {c} | {_f(durable['postgres_ms_per_job'], 3)} | "
            f"{_f(durable['jobs_per_pg_core_s'], 0)} | {_f(durable['db_commits_per_job'], 2)} | "
            f"{_f(durable.get('jobs_per_message'), 2)} | "
            f"{_f(proc.get('postgres_ms_per_job'), 3)} | "
            f"{_f(proc.get('jobs_per_pg_core_s'), 0)} |"
        )
    return lines


def _cpu_row(label: str, c: Any, row: dict[str, Any], jobs_per_s: float) -> str:
    return (
        f"| {label} | {c} | {_f(jobs_per_s)} | {_f(row['driver'], 2)} | {_f(row['worker'], 2)} | "
        f"{_f(row['worker_main'], 2)} | {_f(row['postgres'], 2)} | {_f(row['redis'], 2)} | "
        f"**{_f(row['total'], 2)}** |"
    )


def _cpu_table(cpu: dict[str, Any] | None, backlog: dict[str, Any] | None) -> list[str]:
    lines = [
        "### 4b. CPU per job, by process (`bench/cpu_split.py`, `bench/backlog.py`)",
        "",
        "CPU time (user + system) from /proc over the round, divided by the jobs: the driver "
        "(the submits), the worker (main process and pool), Redis, and PostgreSQL: the "
        "on-CPU time of the backends serving the contender's own database (`bench/pgcpu.py`; "
        "the server is shared with test runs, so its other processes are not counted, nor "
        "its shared WAL writer and checkpointer). On 2 cores the total bounds throughput "
        "once both are busy.",
        "",
    ]
    if cpu:
        per_message = ", ".join(
            f"{name} {cpu[name]['jobs_per_message']:.2f}"
            for name in ("durable_alone", "durable")
            if "jobs_per_message" in cpu.get(name, {})
        )
        lines.append(
            f"- End-to-end rows: one worker process per contender, {cpu['jobs']:,} no-op "
            f"jobs from {cpu['submitters']} driver threads after a warm-up, workers consuming "
            "while the driver submits; jobs/s of that round. With company, the fast path's "
            "publisher packs rows of concurrent submits into batch messages "
            "(`outbox/fastpath.py`), "
            "so the durable row as shipped is partly batched"
            + (f" (jobs per message: {per_message})" if per_message else "")
            + "; the single-message row turns packing off (`OUTBOX_BATCH_MAX=1` in the "
            "driver) to show the one-job-per-message path alone."
        )
    if backlog:
        lines.append(
            f"- Backlog rows: the drains of section 8 ({backlog['jobs']:,} jobs, medians of "
            f"{backlog['rounds']} rounds): driver = the submits with no worker up "
            "(`submit_many` / `task.delay()`), worker = from ready to drained; jobs/s of the "
            "drain."
        )
    lines += [
        "",
        "| mode | workers | jobs/s | driver | worker (all) | worker main | PostgreSQL | Redis "
        "| total ms/job |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "durable_alone": "durable, single-message path (`jobs.submit`, OUTBOX_BATCH_MAX=1)",
        "durable": "durable, `jobs.submit` as shipped (concurrent commits may share messages)",
        "raw_celery": "raw Celery",
        "procrastinate": "Procrastinate",
    }
    for name, label in labels.items():
        row = (cpu or {}).get(name)
        if row:
            lines.append(_cpu_row(label, (cpu or {}).get("concurrency", 1), row, row["jobs_per_s"]))
    for c, entry in ((backlog or {}).get("by_concurrency") or {}).items():
        for name, label in (
            ("durable", "durable, batch path (backlog drain, `submit_many`)"),
            ("durable_analyzed", "durable, batch path, stats after the burst"),
            ("raw_celery", "raw Celery (backlog drain)"),
        ):
            row = entry.get(name)
            if not row:
                continue
            lines.append(_cpu_row(label, c, row["cpu_ms_per_job"], row["jobs_per_s"]))
    lines.append("")
    return lines


def _latency_targets(latency: dict[str, Any]) -> list[dict[str, Any]]:
    """Idle accept->start (fast path) against raw Celery's call->start and Procrastinate's
    accept->start of the same run, and its p99 bound."""
    fast = latency["fast"]
    p50 = fast["accept_to_start_p50_ms"]
    out: list[dict[str, Any]] = []
    raw = latency.get("raw")
    if raw:
        limit = raw["call_to_start_p50_ms"] + TARGET_START_OVER_RAW_MS
        out.append(
            {
                "name": f"idle accept->start p50 <= raw Celery call->start p50 + "
                f"{TARGET_START_OVER_RAW_MS} ms ({limit:.2f} ms, same run)",
                "value": f"{p50:.2f} ms",
                "ok": p50 <= limit,
            }
        )
    pro = latency.get("procrastinate")
    if pro:
        limit = pro["accept_to_start_p50_ms"]
        out.append(
            {
                "name": f"idle accept->start p50 <= Procrastinate's ({limit:.2f} ms, same run)",
                "value": f"{p50:.2f} ms",
                "ok": p50 <= limit,
            }
        )
    p99 = fast["accept_to_start_p99_ms"]
    out.append(
        {
            "name": f"idle accept->start p99 <= {TARGET_START_P99_MS:.0f} ms (fast path)",
            "value": f"{p99:.1f} ms",
            "ok": p99 <= TARGET_START_P99_MS,
        }
    )
    return out


def _latency_table(lat: dict[str, Any]) -> list[str]:
    lines = [
        "### 5. Accept -> start (`Job.created_at` -> the `leased` JobEvent.at)",
        "",
        f"{lat['worker_concurrency']} worker processes idle-waiting, one job at a time "
        f"(submits 80-160 ms apart, each job done long before the next), "
        f"{lat['jobs_per_mode']} jobs per mode. Batched = jobs claimed from a "
        "`jobs.execute_many` message: 0 means every job took the single-message default path.",
        "",
        "Split at the moment `jobs.submit` returned in the driver: the submit call "
        "(`created_at` is stamped before the INSERT; then commit and fast-path publish) and "
        "the delivery (return -> the worker's claim: broker, Celery's main process, the pool "
        "process, the claim statement). Call -> start runs from the call of `jobs.submit`; "
        "the raw Celery row is the same for `delay()` of a no-op on a worker of the same shape "
        "(prefork, 2 processes, prefetch 1, acks_late, no database), paced the same, rounds "
        "interleaved: what the broker and Celery alone cost here.",
        "",
        "| mode | p50 ms | p99 ms | submit call p50 / p99 | return -> start p50 / p99 "
        "| call -> start p50 / p99 | batched |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    modes = {
        "fast": "fast path (the default)",
        "relay_only": f"relay loop alone, {lat['relay_interval_s']} s (as beat at 1 s)",
        "fast_reuse": "fast path, proposal: worker keeps its DB connection",
    }
    for key, label in modes.items():
        row = lat.get(key)
        if row:
            lines.append(
                f"| {label} | {_f(row['accept_to_start_p50_ms'], 2)} | "
                f"{_f(row['accept_to_start_p99_ms'], 2)} | "
                f"{_f(row.get('submit_call_p50_ms'), 2)} / "
                f"{_f(row.get('submit_call_p99_ms'), 2)} | "
                f"{_f(row.get('return_to_start_p50_ms'), 2)} / "
                f"{_f(row.get('return_to_start_p99_ms'), 2)} | "
                f"{_f(row.get('call_to_start_p50_ms'), 2)} / "
                f"{_f(row.get('call_to_start_p99_ms'), 2)} | {row.get('batched_jobs', 'n/a')} |"
            )
    pro = lat.get("procrastinate")
    if pro:
        lines.append(
            "| Procrastinate no-op, `defer()` (its `deferred` -> `started` events) | "
            f"{_f(pro['accept_to_start_p50_ms'], 2)} | {_f(pro['accept_to_start_p99_ms'], 2)} | "
            f"{_f(pro['submit_call_p50_ms'], 2)} / {_f(pro['submit_call_p99_ms'], 2)} | "
            f"{_f(pro['return_to_start_p50_ms'], 2)} / {_f(pro['return_to_start_p99_ms'], 2)} | "
            f"{_f(pro['call_to_start_p50_ms'], 2)} / {_f(pro['call_to_start_p99_ms'], 2)} | |"
        )
    raw = lat.get("raw")
    if raw:
        lines.append(
            "| raw Celery no-op, `delay()` (no database) | | | | | "
            f"{_f(raw['call_to_start_p50_ms'], 2)} / {_f(raw['call_to_start_p99_ms'], 2)} | |"
        )
    lines.append("")
    return lines


def _backlog_table(backlog: dict[str, Any]) -> list[str]:
    lines = [
        "### 8. Backlog drain: the batch path (`bench/backlog.py`)",
        "",
        f"{backlog['jobs']:,} no-op jobs queued with the workers down, then one worker started "
        f"and the queue drained; the three contenders take turns, {backlog['rounds']} rounds "
        "each, order rotated. Durable: `jobs.submit_many` calls of "
        f"{backlog['chunk']:,} requests, each commit publishing its rows packed into "
        f"`jobs.execute_many` messages of up to OUTBOX_BATCH_MAX = {backlog['batch_max']}; "
        "drain = first claim (min `leased` JobEvent.at) -> last completion (max "
        "`finished_at`). Raw Celery: one `raw.noop` message per task; drain = first task "
        "start -> last task end, stamped by the pool processes (`task_prerun` / "
        "`task_postrun`, `bench/raw_app.py`). Same prefork worker, concurrency, prefetch 1 "
        "and acks_late for both; worker start-up is outside both windows, and both clocks "
        "stop at the last job's end, before its ack.",
        "",
        "Every durable round starts from empty job tables, `VACUUM (ANALYZE)`d: the "
        "planner's statistics are those of a quiet system before a burst (this server runs "
        "with autovacuum off; with it on, they stay so until autovacuum's next ANALYZE, up to "
        "a minute or so into the burst). *durable, stats after the burst* is the same round "
        "with one `ANALYZE` once the backlog is in, before the workers start.",
        "",
        "| workers | contender | jobs/s (drain) | / raw Celery | jobs/message | PG CPU "
        "ms/job | jobs/s per PG core | commits/job | batch-claimed | submit jobs/s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "durable": ("durable, stats before the burst", "ratio_vs_raw"),
        "durable_analyzed": ("durable, stats after the burst", "ratio_analyzed_vs_raw"),
        "raw_celery": ("raw Celery", None),
    }
    for c, entry in backlog["by_concurrency"].items():
        for name, (label, ratio_key) in labels.items():
            row = entry.get(name)
            if not row:
                continue
            ratio = f"**{entry[ratio_key]:.2f}x**" if ratio_key else ""
            if name == "raw_celery":
                database = "| | | |"
            else:
                database = (
                    f"{_f(row['cpu_ms_per_job']['postgres'], 3)} | "
                    f"{_f(row['jobs_per_pg_core_s'], 0)} | {_f(row['db_commits_per_job'], 3)} | "
                    f"{row['batched_share'] * 100:.0f}% |"
                )
            lines.append(
                f"| {c} | {label} | {_f(row['jobs_per_s'])} | {ratio} | "
                f"{_f(row['jobs_per_message'], 1)} | {database} {_f(row['submit_jobs_per_s'])} |"
            )
    lines += ["", "Per-round drain throughput (jobs/s):", ""]
    for c, entry in backlog["by_concurrency"].items():
        parts = [f"{name} {entry[name]['rounds']}" for name in labels if name in entry]
        lines.append(f"- c={c}: " + "; ".join(parts))
    lines += [
        "",
        "PostgreSQL CPU and commits per job cover the whole round, submit included: the "
        "bench database's backends from the first `submit_many` to the last ack; "
        "`xact_commit` delta of the round read once every backend exited (the `ANALYZE` "
        "taken out).",
        "",
    ]
    return lines


def summary(results: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    lines = ["", "==== results ====", *_tables(results), "==== targets ===="]
    for t in checks:
        lines.append(f"{'PASS' if t['ok'] else 'FAIL'}  {t['name']}: {t['value']}")
    return "\n".join(lines)


def markdown(meta: dict[str, Any], results: dict[str, Any], checks: list[dict[str, Any]]) -> str:
    m = meta["machine"]
    lines = [
        "# Benchmarks",
        "",
        "Written by `bench/run_all.py` (`make bench`); do not edit by hand — rerun it.",
        "",
        "## Machine and run",
        "",
        f"- Date: {meta['date']}; run took {meta['elapsed_s']:.0f} s.",
        f"- CPU: {m['cpu']}, nproc {m['nproc']}; memory {m['memory']}; {m['os']}.",
        f"- Load average at start: {m['load_at_start']} (the machine is shared with other "
        "test runs: absolute numbers are noisy, so every comparison is a ratio of "
        "contenders measured in alternating rounds of the same run; medians reported).",
        f"- PostgreSQL {m['postgresql']}, Redis {m['redis']} (a private `redis-server` "
        f"started for the run), Python {m['python']}, Django {m['django']}, Celery "
        f"{m['celery']}, Procrastinate {m['procrastinate']}.",
        f"- Sizes: {meta['args']['jobs']} jobs per round, {meta['args']['rounds']} rounds, "
        f"worker processes {meta['args']['concurrencies']}; backlog drain and submit_many: "
        f"{meta['args'].get('backlog', 0):,} jobs per round.",
        "",
        "## Commands",
        "",
        "```",
        "make bench                       # = .venv/bin/python bench/run_all.py (full run)",
        f"{meta['command'].strip()}   # the run recorded here",
        "python bench/run_all.py --quick  # smaller, c=1,2; prints only",
        "python bench/run_all.py --only e2e --concurrency 2 --jobs 500",
        "python bench/run_all.py --only cpu      # CPU ms per job by process, 1,000 jobs each",
        "python bench/run_all.py --only cpu,calls  # and each database call alone, the ceiling",
        "python bench/run_all.py --only backlog,submitmany   # the batch path, 10,000 jobs",
        "python bench/run_all.py --only backlog --backlog 2000 --concurrency 2",
        "python bench/run_all.py --only slowlink --write-docs  # make bench-slow-link: "
        "section 9 alone",
        "python bench/run_all.py --only statements --concurrency 2 --write-docs  # section 4d "
        "alone",
        "python bench/run_all.py --only priority --write-docs  # section 10 alone",
        "python bench/run_all.py --only storage --write-docs  # section 11 alone",
        "python bench/run_all.py --render       # rewrite this file from var/bench/last.json",
        "```",
        "",
        "Workers: `celery -A jobsite worker --pool=prefork --concurrency=N --queues=jobs "
        "--without-gossip --without-mingle --without-heartbeat` (durable) and the same with "
        "`-A bench.raw_app --queues=raw` (raw Celery: `bench/raw_app.py`, acks_late, "
        "reject_on_worker_lost, prefetch 1, same time limits, no Django). Task events off for "
        "both. Procrastinate: `python -m procrastinate --app=bench.proc_app.app worker "
        "--queues=bench --concurrency=N` on its own database (`dj_bench_procrastinate`), an "
        "async no-op task. Databases: `dj_bench_main`, `dj_bench_10k`, `dj_bench_10m`, "
        "`dj_bench_reuse` (only with the connection-reuse comparison, now shipped), "
        "`dj_bench_backlog` (backlog drain and submit_many, emptied every round).",
        "",
        "## Targets",
        "",
        "| target | measured | result |",
        "|---|---:|---|",
    ]
    for t in checks:
        lines.append(f"| {t['name']} | {t['value']} | {'PASS' if t['ok'] else '**FAIL**'} |")
    lines += ["", "## Results", "", *_tables(results)]
    lines += _findings(results)
    lines += [
        "## How each number is taken",
        "",
        "- **Throughput** counts from the first submit to the last ack, with the driver "
        "submitting from several threads (a web tier has many submitters) while the "
        "workers consume: submit, relay (fast path), "
        "claim, complete and ack are all inside the window.",
        "- **DB commits per job**: `pg_stat_database.xact_commit` delta of the bench database "
        "over a whole concurrency block (warm-up included), read after every backend of the "
        "database exited (backends flush their statistics at exit), divided by the jobs of "
        "the block. Read-only autocommit statements count as transactions in PostgreSQL too. "
        "For Procrastinate our own completion polls are subtracted.",
        "- **Broker commands per job**: Redis `total_commands_processed` delta per round on "
        "the private Redis, minus our own `INFO` polls, divided by the jobs; pipelined "
        "commands count one each, so round trips are at most this. Idle workers of the other "
        "contenders add their `BRPOP` timeouts (about one per second each).",
        "- **Commit -> publish**: `published_at - created_at` of the job's `jobs.execute` "
        "outbox row. **Accept -> start**: the first `leased` JobEvent's `at` minus "
        "`Job.created_at` (both stamped by the Python clock of the same machine).",
        "- The relay-only mode runs `manage.py outbox_relay --loop --interval 1`, which sweeps "
        "like the beat entry at `OUTBOX_RELAY_INTERVAL=1` without beat's own dispatch delay.",
        "- 10k/10M: the table is topped up with finished (`succeeded`) no-op jobs by one "
        "`INSERT ... SELECT generate_series` and `VACUUM ANALYZE`d; rows are kept between runs.",
        "- **PostgreSQL CPU per job** (`bench/pgcpu.py`): the on-CPU time "
        "(`/proc/PID/schedstat`) of every backend connected to the contender's database, "
        "sampled every 0.2 s from `pg_stat_activity` and read once more by each submitting "
        "thread before it closes its connection; a backend present at the start counts from "
        "its reading then, a later one from zero. The server's shared processes (WAL writer, "
        "checkpointer, background writer) serve every database on the server, test runs' "
        "included, and are not counted. Our own polling connections are excluded. Jobs/s per "
        "PostgreSQL core = 1,000 / (PG CPU ms per job): the rate one fully busy core of "
        "PostgreSQL would sustain.",
        "- **Backlog drain**: see section 8. The ratio durable / raw is the median of "
        "per-round ratios, one durable and one raw round after each other, their order "
        "alternating.",
        "",
    ]
    return "\n".join(lines)


def _calls_table(calls: dict[str, Any], cpu: dict[str, Any] | None) -> list[str]:
    from bench.db_calls import CALLS, ceilings

    lines = [
        "### 4c. A durable job's database calls, one at a time (`bench/db_calls.py`)",
        "",
        f"Each call made {calls['calls']:,} times in a row from the driver, no worker, no "
        "broker, on a vacuumed database: the on-CPU time of the PostgreSQL backend serving it "
        "(/proc/PID/schedstat) and of the driver, per call, the median of five chunks (a "
        "checkpoint's full-page writes land in one). Nothing else runs, so these are the "
        "cheapest the calls get here; under the load of table 4b PostgreSQL spends more per "
        "job (contention, more backends). The fast path batches its marks "
        "(`outbox/marks.py`), so a real job pays only a share of the mark row: the ceiling "
        "below counts it whole.",
        "",
        "| call | PostgreSQL CPU ms | driver CPU ms | wall ms |",
        "|---|---:|---:|---:|",
    ]
    for name in CALLS:
        row = calls[name]
        lines.append(
            f"| {name} | {_f(row['postgres_ms'], 3)} | {_f(row['driver_ms'], 3)} | "
            f"{_f(row['wall_ms'], 3)} |"
        )
    lines.append(
        f"| **all four** | **{_f(calls['total_postgres_ms'], 3)}** | "
        f"**{_f(calls['total_driver_ms'], 3)}** | **{_f(calls['total_wall_ms'], 3)}** |"
    )
    lines.append("")
    if cpu and "raw_celery" in cpu:
        ceiling = ceilings(calls, cpu)
        text = (
            f"**Ceiling.** A durable job does what a raw Celery job does (table 4b: "
            f"{_f(cpu['raw_celery']['total'], 2)} ms of CPU) plus these calls, so even if "
            f"durable-jobs' own Python cost nothing it would need {_f(ceiling['floor_ms'], 2)} "
            f"ms: at most **{_f(ceiling['vs_raw'], 2)}x** raw Celery's throughput"
        )
        if "vs_procrastinate" in ceiling:
            text += (
                f" and **{_f(ceiling['vs_procrastinate'], 2)}x** Procrastinate's "
                f"({_f(cpu['procrastinate']['total'], 2)} ms)"
            )
        lines += [
            text + ", on a CPU-bound machine, when every job travels alone. That is no longer "
            "the only case: rows of concurrent submits share a batch message "
            "(`outbox/fastpath.py`), whose jobs share one claim and one completion "
            "statement, so under concurrent submits (sections 3-4: jobs/message > 1) the "
            "durable side can pass this ceiling.",
            "",
        ]
    return lines


def _findings(results: dict[str, Any]) -> list[str]:
    """Where the time goes (profiling notes, py-spy / EXPLAIN) and what would change it."""
    lines = [
        "## API submission latency (`bench/bench_api.py`, run separately)",
        "",
        "`PYTHONPATH=. .venv/bin/python bench/bench_api.py --n 300` (2026-11-30 07:43 UTC, "
        "quiet machine, fast path off so every path measures the commit of job + event + "
        "outbox row; rerun it to refresh these numbers):",
        "",
        "| path | p50 ms | p99 ms | mean ms |",
        "|---|---:|---:|---:|",
        "| `jobs.submit()` alone | 8.32 | 14.46 | 8.55 |",
        "| API via Django test Client | 14.12 | 24.15 | 14.33 |",
        "| API replay (same Idempotency-Key) | 11.75 | 20.69 | 12.17 |",
        "| API over HTTP to gunicorn (1 sync worker) | 16.47 | 25.78 | 17.07 |",
        "",
        *_batch_findings(results),
        "## Where the time went before the batch path (issue 15 and earlier)",
        "",
        "- **On this machine the limit is CPU, not the disk.** `pg_test_fsync` measured "
        "0.3-0.4 ms per flush on 2026-12-01 (an earlier machine took ~8 ms). With 2 cores "
        "shared by the driver, the workers, PostgreSQL and Redis, throughput at c >= 2 is "
        "about 2,000 ms / (CPU ms per job): see table 4b. Raw Celery spends ~5 ms of CPU "
        "per no-op job (5-7 on a busier machine), Procrastinate ~8-11, durable-jobs 10-19 "
        "(table 4b is one round per contender, not interleaved, so it moves with the "
        "machine's load more than the ratios do).",
        "- **First pass, 2026-12-01, measured with table 4b's tool** (CPU ms per job, "
        "durable, before -> after, same hour): driver 7.8 -> 3.5, worker 10.2 -> 4.5, "
        "PostgreSQL 6.3 -> 3.2, total 24.8 -> 11.7; DB commits per job 7.1 -> 4.1; "
        "durable / raw Celery 0.19-0.27x -> 0.41-0.49x, durable / Procrastinate "
        "0.30-0.34x -> 0.60-0.79x across the day's runs. The changes: the "
        "claim is one call of the PL/pgSQL function `jobs_claim` (cached plans; it returns "
        "the input, so there is no separate read) and a plain completion one call of "
        "`jobs_complete`; the submit's three rows go in one INSERT statement whose SQL is "
        "compiled once; the fast path publishes from memory and marks with one call; "
        "heartbeats run on one thread per process (starting and joining a thread per job "
        "was a fifth of the worker's time); input schemas are compiled once; the per-task "
        "health check is skipped while busy; five index writes per job-row version are gone; "
        "admission control takes its locks and finds the serialization key's head in one "
        "call (`jobs_admission_lock`), and a keyed submit writes its outbox row in the same "
        "statement as the job (table 7 had dropped to 0.64x when only the unkeyed path was "
        "fast).",
        "- **Vacuum matters more than any of that.** This machine's PostgreSQL runs with "
        "autovacuum off. Before the bench vacuumed its databases, 25,000 dead job rows "
        "doubled the claim's PostgreSQL CPU (1.6 -> 0.75 ms after one `VACUUM`). Every "
        "block of the bench now starts from a vacuumed database, as autovacuum would give.",
        "- **Second pass, later on 2026-12-01 (another machine of the same kind; its first "
        "full run, before these changes: durable / raw Celery 0.33-0.36x, durable / "
        "Procrastinate 0.52-0.54x, keys 0.77x).** `perf` on the PostgreSQL backend showed a "
        "third of the accept's time in parsing, analysing and planning: Django binds values "
        "on the client, so every statement arrived as new text. The per-job statements are "
        "now server-side prepared statements on Django's own connection (`jobs/prepared.py`; "
        "accept 0.88 -> 0.55 ms of PostgreSQL CPU and 1.18 -> 0.93 ms of the driver's, claim "
        "0.65 -> 0.50, measured A/B in one process). Some connections re-planned the claim "
        "on every call, because PL/pgSQL's choice between a custom and a generic plan "
        "depended on the statistics of the moment (1.27 vs 0.42 ms per claim in alternating "
        "runs): the three hot functions now always use their generic plan, which is the "
        "primary-key lookup. `jobs_claim_lock_keys` was a SQL function planned on every "
        "claim; it is PL/pgSQL now. The fast path's marks are batched per process "
        "(`outbox/marks.py`): a submit is one database call and one commit, where it was "
        "two. The heartbeat thread is no longer woken at every job's start and end.",
        "- **The ceiling (table 4c).** A durable job does everything a raw Celery job does "
        "plus its database calls. Measured alone, those calls cost PostgreSQL 1.4-2.0 ms, so "
        "even if durable-jobs' own Python cost nothing, durable / raw Celery could not pass "
        "0.62-0.79x here, and durable / Procrastinate 0.89-1.31x (the range of four runs on "
        "2026-12-01: the machine's speed changed by 2x between them, and the ratios of fixed "
        "costs with it). The 0.6x target sits just under that ceiling, the target of beating "
        "Procrastinate inside its range: to meet them, what lies between would have to "
        "vanish. It is our "
        "Python (table 4b: the driver spends about 2 ms more per job than raw Celery's, the "
        "worker about 1.5-2 ms more) and PostgreSQL under concurrent load spending about "
        "twice what each call costs alone. Closing it needed work shared across jobs: issue "
        "16 did it (batch messages, one claim and one group commit per message, the fast "
        "path packing concurrent commits); see the section above for what it changed.",
        "- **What is left to try.** jobs_job's eleven CHECK constraints are read again from "
        "their stored form by every statement that writes the row (`perf`: ExecConstraints, "
        "a tenth of the claim's and completion's PostgreSQL time); fewer, simpler "
        "constraints would cost less. Preparing the insert's values bypasses Django's field "
        "preparation only partly (a quarter of the accept's Python time is "
        "`get_db_prep_save`). kombu builds a new redis-py client for every publish and "
        "every ack (about 0.1 ms each, paid by raw Celery too), and `Producer.batch()` "
        "would make the relay's sweep one pipelined round trip per batch.",
        "- **Table size is not a factor:** the claim is a primary-key lookup and the due / "
        "expired-lease indexes are partial (only active rows), so 10M finished rows leave "
        "the per-job plan unchanged (`EXPLAIN` of the claim: index scan on `jobs_job_pkey`).",
        "",
    ]
    return lines


def _get(results: dict[str, Any], *path: str) -> Any:
    node: Any = results
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _batch_findings(results: dict[str, Any]) -> list[str]:
    """Issue 16: what sharing work across jobs changed, read from this run's results; the
    profiles quoted were taken on the same machine on 2026-12-01, beside the runs."""
    lines = ["## Where the time goes now (issue 16: work shared across jobs)", ""]
    backlog = _get(results, "backlog", "by_concurrency") or {}
    if backlog:
        ratios = ", ".join(
            f"c={c}: {e['ratio_vs_raw']:.2f}x ({e['ratio_analyzed_vs_raw']:.2f}x after an ANALYZE)"
            for c, e in backlog.items()
        )
        cpu = {c: e["durable"]["cpu_ms_per_job"] for c, e in backlog.items()}
        raw = {c: e["raw_celery"]["cpu_ms_per_job"] for c, e in backlog.items()}
        lines.append(
            "- **Backlog drain** (section 8: "
            f"{ratios}). Raw Celery pays a message, a delivery and an ack per task: its "
            "worker spends "
            + ", ".join(f"{raw[c]['worker']:.2f}" for c in raw)
            + " ms of CPU per job. A durable batch message carries up to 20 jobs, claimed by "
            "one statement and completed by one group commit, so the worker spends "
            + ", ".join(f"{cpu[c]['worker']:.2f}" for c in cpu)
            + " ms per job and PostgreSQL "
            + ", ".join(f"{cpu[c]['postgres']:.2f}" for c in cpu)
            + " ms (commits per job "
            + ", ".join(f"{e['durable']['db_commits_per_job']:.2f}" for e in backlog.values())
            + ", submit included). Both batch functions reach `jobs_job` by primary key "
            "whatever the planner's statistics (`tests/integration/test_batch_plans.py`)."
        )
    e2e = _get(results, "e2e", "by_concurrency") or {}
    if e2e:
        per_message = ", ".join(
            f"{e['durable'].get('jobs_per_message', 1):.1f}" for e in e2e.values()
        )
        commits = ", ".join(f"{e['durable']['db_commits_per_job']:.2f}" for e in e2e.values())
        pg = ", ".join(
            f"{e['durable'].get('postgres_ms_per_job', float('nan')):.2f}" for e in e2e.values()
        )
        lines.append(
            "- **Single submits end to end** (sections 3-4, c = "
            + ", ".join(e2e)
            + ": durable / raw Celery "
            + ", ".join(f"{e['ratio_vs_raw']:.2f}x" for e in e2e.values())
            + (
                ", durable / Procrastinate "
                + ", ".join(
                    f"{e['ratio_vs_procrastinate']:.2f}x"
                    for e in e2e.values()
                    if "ratio_vs_procrastinate" in e
                )
                if any("ratio_vs_procrastinate" in e for e in e2e.values())
                else ""
            )
            + "). Each `jobs.submit` is still its caller's own transaction: one statement, one "
            "commit. What changed is who publishes. A thread that commits alone publishes "
            "inline, as before; while other threads of the process are inside `jobs.submit`, "
            "its row goes to the process's publisher thread, which waits until they are done, "
            "a message is full (20) or 50 ms passed (`outbox/fastpath.py`). With 4 submitting "
            f"threads that gave {per_message} jobs per message, so each message's claim and "
            "group commit are shared that many ways: "
            f"{commits} commits and {pg} ms of PostgreSQL CPU per job, submit included. The "
            "floor is 1 + 2/k commits per job (the accept, plus a claim and a group commit per "
            "message of k jobs); the rest is connection set-up, the first preparation of each "
            "statement on a connection (psycopg's Parse runs in a transaction of its own), the "
            "batched marks (one per 0.25 s per process) and the warm-up rounds, whose lone "
            "jobs travel alone. The PostgreSQL CPU is mostly the accept itself: about 0.45 ms "
            "for one INSERT of three rows across 22 indexes, and its commit (table 4c)."
        )
    many = results.get("submitmany")
    if many:
        lines.append(
            "- **`submit_many`** is "
            + f"{many['ratio_submit_many_vs_single']:.1f}x single submits (section 1b), at "
            f"{_f(many['submit_many']['postgres_ms_per_job'], 3)} ms of PostgreSQL CPU per "
            "job. Its plain requests are written column-wise (`jobs/bulk.py`): one "
            "`INSERT ... SELECT FROM unnest(...)` per table, each column sent once as a binary "
            "array parameter, no model object per event row; before, Django's `bulk_create` "
            "field preparation and psycopg's client-side quoting of the arrays were 90% of the "
            "call (4.9-8.2x). About a third of what is left is publishing the 500 batch "
            "messages."
        )
    lat = results.get("latency", {}).get("fast")
    if lat:
        raw = results.get("latency", {}).get("raw") or {}
        floor = (
            "Raw Celery alone, `delay()` of a no-op on a worker of the same shape with no "
            f"database, took {raw['call_to_start_p50_ms']:.2f} ms p50 from call to start in "
            "the same run (durable-jobs from the call of `jobs.submit`: "
            f"{lat.get('call_to_start_p50_ms', float('nan')):.2f} ms). "
            if raw
            else ""
        )
        lines.append(
            "- **Idle accept -> start**: p50 "
            f"{lat['accept_to_start_p50_ms']:.1f} ms, p99 {lat['accept_to_start_p99_ms']:.1f} "
            f"ms (targets: p50 within {TARGET_START_OVER_RAW_MS} ms of raw Celery's call -> "
            f"start and at most Procrastinate's accept -> start; p99 "
            f"{TARGET_START_P99_MS:.0f} ms): the submit "
            f"call {lat['submit_call_p50_ms']:.2f} ms p50, then the delivery "
            f"{lat['return_to_start_p50_ms']:.2f} ms. An idle submit is alone, so it never "
            f"waits for company (column batched: {lat.get('batched_jobs', 0)}). "
            + floor
            + "On this machine a process that slept ~100 ms is slow to wake: a `SELECT 1` "
            "round trip costs 0.07 ms back to back and 0.70 ms with 100 ms between calls, and "
            "the path from accept to start wakes seven sleeping processes in turn (the "
            "database for the INSERT, the submitter for its answer, Redis, Celery's main "
            "process, Redis again for kombu's unacked write, the pool process, the database "
            "for the claim). Timed with signal probes on a worker beside the run (2026-12-01 "
            "19:40 UTC, p50): 0.1-0.3 ms to prepare the values after `created_at` is stamped, "
            "1.5 ms for the INSERT and its commit (1.1 back to back; the WAL flush a durable "
            "accept needs is 0.36 of it), 0.5 ms from the commit to the push (fast path, "
            "Celery's message, kombu), 0.9 ms until Celery's main process has the task "
            "(kombu's unacked write included), 0.8 ms until the pool process starts it, "
            "0.15 ms of durable-jobs' wrapper, 0.8 ms until the `leased` event inside "
            "`jobs_claim`. What durable-jobs adds to raw Celery is the INSERT's and the "
            "claim's round trips, which its guarantees need. The kept producer's Redis channel "
            "now builds one redis-py client per pool instead of one per publish "
            "(`outbox/kombu_redis.py`: 590 -> 355 us per publish back to back)."
        )
    serial = results.get("serial")
    if serial:
        lines.append(
            f"- **Serialization keys: {serial['ratio_keys_vs_none']:.2f}x no keys** "
            f"({_f(serial['many_keys_jobs_per_s'])} jobs/s with keys, "
            f"{_f(serial['no_keys_jobs_per_s'])} without). A keyed submit is one statement "
            "(the key's lock and head check inside the INSERT, `jobs.admission.insert_admitted`; "
            "it was four round trips), and a batch message's keyed heads complete, take their "
            "keys' locks and find their next heads in one statement "
            "(`jobs_complete_many_hand_over`; a keyed batch of 20 was 61 statements, now 2). "
            "Caveat: 200 jobs per round over 256 keys means no two jobs of a round share a "
            "key, so every keyed job is its key's head and no hand-over waits; with 600 jobs "
            "(2.3 per key) a run gave 0.60x. The scenario measures the cost of carrying a key, "
            "not of waiting for one."
        )
    lines.append("")
    return lines
