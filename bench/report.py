"""Targets, the console summary and docs/benchmarks.md, from the results of one run."""

from __future__ import annotations

import math
from typing import Any

TARGET_E2E_VS_RAW = 0.6
TARGET_START_P50_MS = 25.0
TARGET_SCALE = 0.9


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
                    "name": f"durable e2e above Procrastinate (c={c})",
                    "value": f"{ratio:.2f}x",
                    "ok": ratio > 1.0,
                }
            )
    latency = results.get("latency")
    if latency:
        p50 = latency["fast"]["accept_to_start_p50_ms"]
        out.append(
            {
                "name": f"accept->start p50 < {TARGET_START_P50_MS:.0f} ms (fast path)",
                "value": f"{p50:.1f} ms",
                "ok": p50 < TARGET_START_P50_MS,
            }
        )
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
    scale = results.get("scale")
    if scale:
        ratio = scale["ratio_1m_vs_10k"]
        out.append(
            {
                "name": f"1M-row table >= {TARGET_SCALE}x the 10k-row throughput",
                "value": f"{ratio:.2f}x",
                "ok": ratio >= TARGET_SCALE,
            }
        )
    return out


def _serial_table(serial: dict[str, Any]) -> list[str]:
    return [
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
            f"Commit -> publish (outbox `published_at - created_at`), {lat['jobs_per_mode']} "
            f"paced submits per mode (80-160 ms apart, below the workers' capacity), "
            "rounds of the two modes interleaved:",
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
    if cpu:
        lines += [
            "### 4b. CPU per job, by process (`bench/cpu_split.py`)",
            "",
            f"One worker process per contender, {cpu['jobs']:,} no-op jobs from "
            f"{cpu['submitters']} driver threads after a warm-up; CPU time (user + system) "
            "from /proc over the round, divided by the jobs. On 2 cores the total bounds "
            "throughput once both are busy (c >= 2).",
            "",
            "| contender | jobs/s | driver | worker (all) | worker main | PostgreSQL | Redis "
            "| total ms/job |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name in ("durable", "raw_celery", "procrastinate"):
            row = cpu.get(name)
            if row:
                lines.append(
                    f"| {name} | {_f(row['jobs_per_s'])} | {_f(row['driver'], 2)} | "
                    f"{_f(row['worker'], 2)} | {_f(row['worker_main'], 2)} | "
                    f"{_f(row['postgres'], 2)} | {_f(row['redis'], 2)} | "
                    f"**{_f(row['total'], 2)}** |"
                )
        lines.append("")
    calls = results.get("calls")
    if calls:
        lines += _calls_table(calls, cpu)
    if lat:
        lines += [
            "### 5. Accept -> start (`Job.created_at` -> the `leased` JobEvent.at)",
            "",
            f"{lat['worker_concurrency']} worker processes idle-waiting, paced submits.",
            "",
            "| mode | p50 ms | p99 ms |",
            "|---|---:|---:|",
            f"| fast path | {_f(lat['fast']['accept_to_start_p50_ms'], 2)} | "
            f"{_f(lat['fast']['accept_to_start_p99_ms'], 2)} |",
            f"| relay loop alone, {lat['relay_interval_s']} s (as beat at 1 s) | "
            f"{_f(lat['relay_only']['accept_to_start_p50_ms'], 2)} | "
            f"{_f(lat['relay_only']['accept_to_start_p99_ms'], 2)} |",
        ]
        if "fast_reuse" in lat:
            lines.append(
                f"| fast path, proposal: worker keeps its DB connection | "
                f"{_f(lat['fast_reuse']['accept_to_start_p50_ms'], 2)} | "
                f"{_f(lat['fast_reuse']['accept_to_start_p99_ms'], 2)} |"
            )
        lines.append("")
    scale = results.get("scale")
    if scale:
        lines += [
            "### 6. Table size: 10k vs 1M finished jobs already in `jobs_job`",
            "",
            f"Durable e2e, {scale['concurrency']} worker processes per database, "
            f"{scale.get('submitters', 1)} submitting threads, "
            f"{scale['jobs_per_round']} jobs per round, the two databases interleaved.",
            "",
            "| rows in jobs_job | jobs/s | per-round |",
            "|---:|---:|---|",
            f"| {scale['rows']['10k']:,} | {_f(scale['10k_jobs_per_s'])} | "
            f"{scale['rounds']['10k']} |",
            f"| {scale['rows']['1m']:,} | {_f(scale['1m_jobs_per_s'])} | {scale['rounds']['1m']} |",
            "",
            f"Ratio 1M / 10k: **{scale['ratio_1m_vs_10k']:.2f}x** (median of per-round ratios).",
            "",
        ]
    if results.get("serial"):
        lines += _serial_table(results["serial"])
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
        f"worker processes {meta['args']['concurrencies']}.",
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
        "```",
        "",
        "Workers: `celery -A jobsite worker --pool=prefork --concurrency=N --queues=jobs "
        "--without-gossip --without-mingle --without-heartbeat` (durable) and the same with "
        "`-A bench.raw_app --queues=raw` (raw Celery: `bench/raw_app.py`, acks_late, "
        "reject_on_worker_lost, prefetch 1, same time limits, no Django). Task events off for "
        "both. Procrastinate: `python -m procrastinate --app=bench.proc_app.app worker "
        "--queues=bench --concurrency=N` on its own database (`dj_bench_procrastinate`), an "
        "async no-op task. Databases: `dj_bench_main`, `dj_bench_10k`, `dj_bench_1m`, "
        "`dj_bench_reuse` (only with the connection-reuse comparison, now shipped).",
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
        "- 10k/1M: the table is topped up with finished (`succeeded`) no-op jobs by one "
        "`INSERT ... SELECT generate_series` and `VACUUM ANALYZE`d; rows are kept between runs.",
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
        lines += [text + ", on a CPU-bound machine.", ""]
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
        "## Where the time goes",
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
        "twice what each call costs alone. Closing it would need work shared across jobs: "
        "claims and completions batched per worker process, or group commit in the web "
        "tier. Both change the contract of one message per job, acknowledged after its own "
        "commit, so neither was attempted.",
        "- **What is left to try.** jobs_job's eleven CHECK constraints are read again from "
        "their stored form by every statement that writes the row (`perf`: ExecConstraints, "
        "a tenth of the claim's and completion's PostgreSQL time); fewer, simpler "
        "constraints would cost less. Preparing the insert's values bypasses Django's field "
        "preparation only partly (a quarter of the accept's Python time is "
        "`get_db_prep_save`). kombu builds a new redis-py client for every publish and "
        "every ack (about 0.1 ms each, paid by raw Celery too), and `Producer.batch()` "
        "would make the relay's sweep one pipelined round trip per batch.",
        "- **Table size is not a factor:** the claim is a primary-key lookup and the due / "
        "expired-lease indexes are partial (only active rows), so 1M finished rows leave "
        "the per-job plan unchanged (`EXPLAIN` of the claim: index scan on `jobs_job_pkey`).",
        "",
    ]
    return lines
