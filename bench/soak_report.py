"""The soak's analysis (bench/soak.py): per-bucket rows, the targets, the plot, the section.

Buckets are --bucket-seconds (a minute) of the load, counted from its start. Targets are
ratios to the run's own first bucket; the section of docs/benchmarks.md sits between its own
markers and is replaced whole by the next `--write-docs` run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.infra import pct
from bench.splice import Section
from bench.splice import splice as splice_section

BEGIN, END = "<!-- soak: begin -->", "<!-- soak: end -->"
INSERT_BEFORE = "## API submission latency"
# No rows in the targets table: the soak's targets are in its own section.
SECTION = Section(BEGIN, END, INSERT_BEFORE, "soak:")
HOT = ("jobs_job", "jobs_jobevent", "outbox_outboxentry")
DEAD_FLOOR = 1000  # a first minute with (almost) no dead tuples: 2x of it is this floor
RECOVERY_S = 300.0  # dead tuples back under 2x within this long after the transaction ends
RSS_GROWTH_KB = 10 * 1024
MIN_SIZE_FOR_BLOAT = 1 << 20  # smaller relations are mostly fixed pages: no per-row ratio
MIN_ADDED_ROWS = 1000  # fewer rows added in a window: its rows stood still
BLOAT_RATIO = 1.25  # bytes per added row after the MVCC trap / before it
DRAIN_ROWS_PER_S = 2000.0


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _slope(points: Iterable[tuple[float, float]]) -> float:
    """Least-squares slope (per minute when x is in minutes)."""
    pts = list(points)
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    var = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / var if var else float("nan")


def _in(t: float, window: tuple[float | None, float | None]) -> bool:
    lo, hi = window
    return lo is not None and hi is not None and lo <= t < hi


def buckets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per bucket of the load: work done, latency, table health, memory."""
    size = float(result["args"]["bucket_seconds"])
    end = float(result["load_end_s"])
    jobs, samples = result["jobs"], result["samples"]
    xact = (result["long_xact"]["begin_s"], result["long_xact"]["end_s"])
    outage = result.get("outage", {})
    down = (outage.get("start_s"), outage.get("end_s"))
    rows = []
    for b in range(max(1, math.ceil(end / size))):
        lo, hi = b * size, (b + 1) * size
        lat = [s * 1000 for at, s in jobs["latency"] if lo <= at < hi]
        done = sum(1 for t in jobs["finished"] if lo <= t < hi)
        inside = [s for s in samples if lo <= s["t"] < hi]
        last = inside[-1] if inside else None
        tables = last["tables"] if last else {}
        phase = [
            name
            for name, window in (("long xact", xact), ("outage", down))
            if window[0] is not None and window[1] is not None and window[0] < hi and window[1] > lo
        ]
        rss = last["rss_kb"] if last else {}
        rows.append(
            {
                "bucket": b,
                "start_s": lo,
                "full": hi <= end,
                "mvcc": hi <= float(result["args"]["minutes"]) * 60,
                "phase": ", ".join(phase),
                "accepted": len(lat),
                "completed": done,
                "p50_ms": pct(lat, 50),
                "p99_ms": pct(lat, 99),
                "sweep_ms": max((s["sweep_ms"] for s in inside), default=float("nan")),
                "full_walk_ms": max(
                    (s["full_walk_ms"] for s in inside if "full_walk_ms" in s),
                    default=float("nan"),
                ),
                "outbox_due": max((s["outbox_due"] for s in inside), default=0),
                "xmin_age": max((s["xmin_age"] for s in inside), default=0),
                "dead": {
                    t: max((s["tables"].get(t, {}).get("dead", 0) for s in inside), default=0)
                    for t in HOT
                },
                "live": {t: tables.get(t, {}).get("live", 0) for t in HOT},
                "total_mb": sum(v["bytes"] for v in tables.values()) / 2**20,
                "worker_mb": rss.get("worker", 0) / 1024,
                "web_mb": rss.get("web", 0) / 1024,
            }
        )
    return rows


def _dead_limit(result: dict[str, Any], table: str) -> tuple[int, int]:
    """(the first minute's dead tuples of `table`, the level they must come back under)."""
    size = float(result["args"]["bucket_seconds"])
    first = [s["tables"].get(table, {}).get("dead", 0) for s in result["samples"] if s["t"] < size]
    base = max([*first, 0])
    return base, 2 * max(base, DEAD_FLOOR)


def _back_in(result: dict[str, Any], table: str) -> float | None:
    """Seconds from the long transaction's end until `table`'s dead tuples were back under
    their limit (None: not within RECOVERY_S)."""
    closed = result["long_xact"]["end_s"]
    if closed is None:
        return None
    _, limit = _dead_limit(result, table)
    return next(
        (
            s["t"] - closed
            for s in result["samples"]
            if closed <= s["t"] <= closed + RECOVERY_S
            and s["tables"].get(table, {}).get("dead", 0) <= limit
        ),
        None,
    )


def _dead_target(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for table in HOT:
        base, _ = _dead_limit(result, table)
        back = _back_in(result, table)
        peak = max(
            (s["tables"].get(table, {}).get("dead", 0) for s in result["samples"]), default=0
        )
        out.append(
            {
                "name": f"{table}: dead tuples back under 2x the first minute's "
                f"({base:,}, floor {DEAD_FLOOR:,}) within {RECOVERY_S / 60:.0f} min of the "
                "long transaction's end",
                "value": f"peak {peak:,}; "
                + (f"back in {back:.0f}s" if back is not None else "not back"),
                "ok": back is not None,
            }
        )
    return out


def _windows(result: dict[str, Any]) -> tuple[tuple[float, float], tuple[float, float]]:
    """Before and after the MVCC trap, in seconds of the load: from the end of the first
    bucket to the long transaction's start, and from the moment vacuum had cleaned up after
    it (every hot table's dead tuples back under their limit; its end if they never were) to
    the end of the MVCC phase. Without a long transaction: the two halves of that phase."""
    size, span = float(result["args"]["bucket_seconds"]), float(result["args"]["minutes"]) * 60
    begin, end = result["long_xact"]["begin_s"], result["long_xact"]["end_s"]
    if begin is None or end is None:
        return (size, span / 2), (span / 2, span)
    backs = [_back_in(result, table) for table in HOT]
    clean = float(end) + max((b for b in backs if b is not None), default=0.0)
    return (size, float(begin)), (min(clean, span), span)


def _added(
    samples: list[dict[str, Any]],
    window: tuple[float, float],
    of: Callable[[dict[str, Any]], float],
) -> float:
    inside = [s for s in samples if window[0] <= s["t"] <= window[1]]
    return of(inside[-1]) - of(inside[0]) if len(inside) >= 2 else float("nan")


def growth(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every jobs_*/outbox_* table and index: size, slope over the last half of the MVCC
    phase, bytes per live row of its table at the first bucket's end and at the end, and
    bytes per row added before the MVCC trap and after it.

    The check is the last pair, "after" counted from the moment vacuum had cleaned up after
    the trap (`_windows`): a relation that then grows faster than its rows did before keeps
    growing without bound; what the trap itself left behind is a level, not a slope.

    The average per row is not judged: it mixes history of another make-up. A B-tree keeps
    equal keys in one posting list, so an index over finished_at, which a group commit gives
    one value for all its jobs, takes 8 B a row when 20 jobs commit together and 23 B when
    each commits alone (docs/benchmarks.md)."""
    size, span = float(result["args"]["bucket_seconds"]), float(result["args"]["minutes"]) * 60
    samples = [s for s in result["samples"] if s["t"] <= span]
    if not samples:
        return []
    first = next((s for s in samples if s["t"] >= size), samples[-1])
    last = samples[-1]
    half = [s for s in samples if s["t"] >= span / 2]
    before, after = _windows(result)
    index_table = _index_tables(last)
    out = []
    names = [(n, "table") for n in last["tables"]] + [(n, "index") for n in last["indexes"]]
    for name, what in sorted(names):

        def bytes_of(s: dict[str, Any], name: str = name, what: str = what) -> float:
            if what == "table":
                return float(s["tables"].get(name, {}).get("bytes", 0))
            return float(s["indexes"].get(name, 0))

        table = name if what == "table" else index_table.get(name, "")

        def live(s: dict[str, Any], table: str = table) -> float:
            return float(s["tables"].get(table, {}).get("live", 0))

        def per_row(s: dict[str, Any]) -> float:
            return bytes_of(s) / live(s) if live(s) else float("nan")

        def per_added_row(window: tuple[float, float]) -> float:
            rows = _added(samples, window, live)
            return _added(samples, window, bytes_of) / rows if rows >= MIN_ADDED_ROWS else math.nan

        grown_after = _added(samples, after, bytes_of)
        marginal_before, marginal_after = per_added_row(before), per_added_row(after)
        ratio = marginal_after / marginal_before if marginal_before > 0 else float("nan")
        if bytes_of(last) < MIN_SIZE_FOR_BLOAT or not table:
            ok = None
        elif math.isnan(ratio):
            # Its rows stood still, or it did not grow with them before the trap: then it
            # may not grow after it either (by more than the pages a size check rounds to).
            ok = not grown_after > MIN_SIZE_FOR_BLOAT
        else:
            ok = ratio <= BLOAT_RATIO
        out.append(
            {
                "name": name,
                "kind": what,
                "bytes": int(bytes_of(last)),
                "slope_bytes_per_min": _slope((s["t"] / 60, bytes_of(s)) for s in half),
                "bytes_per_row_first": per_row(first),
                "bytes_per_row_end": per_row(last),
                "per_row_ratio": per_row(last) / per_row(first) if per_row(first) else math.nan,
                "per_added_row_before": marginal_before,
                "per_added_row_after": marginal_after,
                "grown_after": grown_after,
                "added_ratio": ratio,
                "ok": ok,
            }
        )
    return out


def _index_tables(sample: dict[str, Any]) -> dict[str, str]:
    """Index name -> its table: as the probe read it from the catalog, or (results from
    before it did) the longest table name the index's name starts with (Django's names;
    an index named otherwise has no table then, and is not judged)."""
    if sample.get("index_tables"):
        return dict(sample["index_tables"])
    tables = sorted(sample["tables"], key=len, reverse=True)
    return {
        index: next((t for t in tables if index.startswith(t)), "") for index in sample["indexes"]
    }


def rss_growth(
    result: dict[str, Any], *, since: float, until: float
) -> dict[str, dict[str, float]]:
    """kB of each single process between the first sample at `since` s and the last one
    before `until` s."""
    samples = result["samples"]
    warm = next((s for s in samples if s["t"] >= since), None)
    inside = [s for s in samples if s["t"] <= until]
    if warm is None or not inside:
        return {}
    last = inside[-1]
    trees = {k.split("/")[0] for k in warm["rss_kb"] if "/" in k}
    out = {}
    for name, kb in warm["rss_kb"].items():
        if name in trees or name not in last["rss_kb"]:
            continue  # a tree's sum (its processes count one by one), or a process now gone
        out[name] = {
            "warm_kb": kb,
            "end_kb": last["rss_kb"][name],
            "growth_kb": last["rss_kb"][name] - kb,
        }
    return out


def analyze(result: dict[str, Any]) -> dict[str, Any]:
    rows = buckets(result)
    mvcc = [r for r in rows if r["full"] and r["mvcc"]]
    base = mvcc[0] if mvcc else rows[0]
    checks: list[dict[str, Any]] = []
    worst_done = min(
        (r["completed"] / base["completed"] for r in mvcc if base["completed"]),
        default=float("nan"),
    )
    checks.append(
        {
            "name": "completed jobs per minute >= 0.9x the first minute's, every minute "
            "(long transaction included)",
            "value": f"{worst_done:.2f}x (first {base['completed']:,})",
            "ok": worst_done >= 0.9,
        }
    )
    worst_p99 = max(
        (r["p99_ms"] / base["p99_ms"] for r in mvcc if base["p99_ms"]), default=float("nan")
    )
    checks.append(
        {
            "name": "accept->start p99 <= 2x the first minute's, every minute",
            "value": f"{worst_p99:.2f}x (first {base['p99_ms']:.1f} ms)",
            "ok": worst_p99 <= 2.0,
        }
    )
    checks += _dead_target(result)
    sizes = growth(result)
    bloated = [g for g in sizes if g["ok"] is False]
    judged = [g for g in sizes if g["ok"] is not None]
    worst = max(
        (g for g in judged if not math.isnan(g["added_ratio"])),
        key=lambda g: g["added_ratio"],
        default=None,
    )
    still = [g["name"] for g in bloated if math.isnan(g["added_ratio"])]
    checks.append(
        {
            "name": "no table or index grows faster than its rows (bytes per row added once "
            f"vacuum cleaned up after the long transaction <= {BLOAT_RATIO}x before it, "
            "relations >= 1 MB; one that did not grow with its rows before grows <= 1 MB; "
            "slopes below)",
            "value": (f"worst {worst['name']} {worst['added_ratio']:.2f}x" if worst else "-")
            + (f"; grew without its rows: {', '.join(still)}" if still else ""),
            "ok": not bloated,
        }
    )
    size, span = float(result["args"]["bucket_seconds"]), float(result["args"]["minutes"]) * 60
    rss = rss_growth(result, since=size, until=span)
    done = sum(1 for t in result["jobs"]["finished"] if size <= t < span)
    top = max(rss.items(), key=lambda kv: kv[1]["growth_kb"], default=None)
    checks.append(
        {
            "name": "RSS growth <= 10 MB per process from the end of the first minute to the "
            "end of the MVCC phase",
            "value": (f"worst {top[0]} {top[1]['growth_kb'] / 1024:+.1f} MB" if top else "-")
            + f" over {done:,} jobs",
            "ok": top is None or top[1]["growth_kb"] <= RSS_GROWTH_KB,
        }
    )
    jobs = result["jobs"]
    checks.append(
        {
            "name": "every accepted job succeeded exactly once (0 lost, 0 duplicated)",
            "value": f"{jobs['accepted']:,} accepted, {jobs['lost']} lost, "
            f"{jobs['succeeded_events_over_one']} duplicated",
            "ok": jobs["lost"] == 0 and jobs["succeeded_events_over_one"] == 0,
        }
    )
    outage = result.get("outage")
    if outage:
        rate = outage["backlog_rows_per_s"] or 0.0
        checks.append(
            {
                "name": f"broker outage: the outbox backlog drains >= {DRAIN_ROWS_PER_S:,.0f} "
                "rows/s once Redis is back (time to drain from its return)",
                "value": f"{rate:,.0f} rows/s; {outage['due_at_return']:,} rows due, drained "
                f"in {outage['time_to_drain_s']:.1f}s (first row out after "
                f"{outage['first_publish_after_s']:.1f}s)",
                "ok": rate >= DRAIN_ROWS_PER_S,
            }
        )
        across = rss_growth(result, since=outage["start_s"] - 1, until=outage["drained_s"] + 10)
        web = across.get("web", {}).get("growth_kb", 0.0)
        checks.append(
            {
                "name": "broker outage: the web-like process does not grow (<= 10 MB from "
                "the outage's start to the drain)",
                "value": f"{web / 1024:+.1f} MB",
                "ok": web <= RSS_GROWTH_KB,
            }
        )
        checks.append(
            {
                "name": "broker outage: submits keep succeeding",
                "value": f"{outage['submit_errors']} failed submits",
                "ok": outage["submit_errors"] == 0,
            }
        )
    return {
        "rows": rows,
        "checks": checks,
        "growth": sizes,
        "rss": rss,
        "ok": all(c["ok"] for c in checks),
        "capacity": result["capacity"],
        "rate": result["rate"],
        "settings": result["settings"],
        "outage": outage,
        "long_xact": result["long_xact"],
        "jobs": {k: v for k, v in jobs.items() if k not in ("latency", "finished")},
        "machine": result["machine"],
        "minutes": float(result["args"]["minutes"]),
        "bucket_seconds": float(result["args"]["bucket_seconds"]),
        "restarts": result["restarts"],
        "slowest_submit_s": result["slowest_submit_s"],
        "time": where_time_went(result),
    }


CPU_NAMES = ("web", "worker", "postgres", "autovacuum")
TOP_STATEMENTS = 3


def where_time_went(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per minute: CPU of each process (share of one core) from the probe's running totals,
    and the database's busy backends (bench/soak_probe.py, ActiveSessions) by statement."""
    timed = [sample for sample in result["samples"] if sample.get("cpu_s")]
    last: dict[int, dict[str, Any]] = {}
    for sample in timed:
        last[int(sample["t"] // 60)] = sample
    active = result.get("active_sessions", {})
    rows = []
    for minute in sorted(last):
        before = last.get(minute - 1) or (timed[0] if minute == 0 else None)
        seen = active.get(str(minute), {"looks": 0, "seen": {}})
        looks = seen["looks"] or 1
        busy: dict[str, float] = {}
        for key, count in seen["seen"].items():
            statement = key.rsplit(" | ", 1)[0]
            busy[statement] = busy.get(statement, 0.0) + count / looks
        cpu = {}
        if before is not None and last[minute]["t"] > before["t"]:
            span = last[minute]["t"] - before["t"]
            cpu = {
                name: (last[minute]["cpu_s"].get(name, 0.0) - before["cpu_s"].get(name, 0.0))
                / span
                * 100
                for name in CPU_NAMES
            }
        rows.append(
            {
                "minute": minute,
                "cpu_pct": cpu,
                "busy": sum(busy.values()),
                "top": sorted(busy.items(), key=lambda kv: -kv[1])[:TOP_STATEMENTS],
            }
        )
    return rows


def time_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        "| min | CPU % web / worker / postgres / autovacuum | busy backends | the busiest "
        "statements (busy backends) |",
        "|---|---|---|---|",
    ]
    for r in report.get("time", []):
        cpu = " / ".join(_f(r["cpu_pct"].get(name, float("nan")), 0) for name in CPU_NAMES)
        top = "; ".join(f"{name} {share:.2f}" for name, share in r["top"])
        lines.append(f"| {r['minute']} | {cpu} | {r['busy']:.2f} | {top} |")
    return lines


def table_lines(report: dict[str, Any]) -> list[str]:
    size = report["bucket_seconds"]
    unit = "min" if size == 60 else f"x{size:g}s"
    lines = [
        f"| {unit} | phase | accepted | completed | p50 ms | p99 ms | sweep ms | full walk ms | "
        "outbox due | xmin age | dead job / event / outbox | tables+indexes MB | worker MB | "
        "web MB |",
        "|" + "---|" * 14,
    ]
    for r in report["rows"]:
        dead = " / ".join(f"{r['dead'][t]:,}" for t in HOT)
        lines.append(
            f"| {r['bucket']} | {r['phase']} | {r['accepted']:,} | {r['completed']:,} | "
            f"{_f(r['p50_ms'])} | {_f(r['p99_ms'])} | {_f(r['sweep_ms'], 2)} | "
            f"{_f(r['full_walk_ms'], 2)} | {r['outbox_due']:,} | {r['xmin_age']:,} | {dead} | "
            f"{_f(r['total_mb'])} | "
            f"{_f(r['worker_mb'])} | {_f(r['web_mb'])} |"
        )
    return lines


def check_lines(report: dict[str, Any]) -> list[str]:
    lines = ["| target | measured | result |", "|---|---|---|"]
    for c in report["checks"]:
        lines.append(f"| {c['name']} | {c['value']} | {'PASS' if c['ok'] else '**FAIL**'} |")
    return lines


def growth_lines(report: dict[str, Any]) -> list[str]:
    lines = [
        "| relation | kind | MB at end | slope, last half (kB/min) | bytes/row first | "
        "bytes/row end | bytes/added row before | after | after/before |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in sorted(report["growth"], key=lambda g: -g["bytes"]):
        if g["bytes"] < 64 * 1024:
            continue
        lines.append(
            f"| {g['name']} | {g['kind']} | {g['bytes'] / 2**20:,.2f} | "
            f"{_f(g['slope_bytes_per_min'] / 1024)} | {_f(g['bytes_per_row_first'], 0)} | "
            f"{_f(g['bytes_per_row_end'], 0)} | {_f(g['per_added_row_before'], 1)} | "
            f"{_f(g['per_added_row_after'], 1)} | {_f(g['added_ratio'], 2)} |"
        )
    return lines


def print_report(report: dict[str, Any]) -> None:
    print()
    print(f"capacity {report['capacity']['jobs_per_s']} jobs/s; load {report['rate']} jobs/s")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in report["settings"].items()))
    for line in [
        *table_lines(report),
        "",
        *time_lines(report),
        "",
        *growth_lines(report),
        "",
        *check_lines(report),
    ]:
        print(line)
    if report["outage"]:
        print(f"outage: {report['outage']}")
    print(f"jobs: {report['jobs']}")
    print(f"long transaction: {report['long_xact']}")
    for restart in report["restarts"]:
        print(f"restarted: {restart}")
    print("verdict:", "PASS" if report["ok"] else "FAIL")


def plot(result: dict[str, Any], report: dict[str, Any], path: Path) -> None:
    """Throughput, p99, dead tuples per hot table, oldest xmin age and RSS over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, samples = report["rows"], result["samples"]
    size = report["bucket_seconds"]
    xb = [(r["start_s"] + size / 2) / 60 for r in rows]
    xs = [s["t"] / 60 for s in samples]
    fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
    axes[0].plot(xb, [r["completed"] * 60 / size for r in rows], marker="o", label="completed")
    axes[0].plot(xb, [r["accepted"] * 60 / size for r in rows], ls="--", label="accepted")
    axes[0].set_ylabel("jobs / min")
    axes[1].plot(xb, [r["p99_ms"] for r in rows], marker="o", label="p99")
    axes[1].plot(xb, [r["p50_ms"] for r in rows], marker=".", label="p50")
    axes[1].set_ylabel("accept->start ms")
    axes[1].set_yscale("log")
    for table in HOT:
        axes[2].plot(xs, [s["tables"].get(table, {}).get("dead", 0) for s in samples], label=table)
    axes[2].set_ylabel("dead tuples")
    axes[3].plot(xs, [s["xmin_age"] for s in samples], label="oldest xmin age")
    axes[3].set_ylabel("xmin age (xids)")
    names = sorted({k for s in samples for k in s["rss_kb"] if "/" not in k})
    for name in names:
        axes[4].plot(xs, [s["rss_kb"].get(name, 0) / 1024 for s in samples], label=name)
    axes[4].set_ylabel("RSS MB (trees)")
    axes[4].set_xlabel("minutes of load")
    xact, outage = result["long_xact"], result.get("outage")
    for ax in axes:
        if xact["begin_s"] is not None and xact["end_s"] is not None:
            ax.axvspan(xact["begin_s"] / 60, xact["end_s"] / 60, color="orange", alpha=0.15)
        if outage:
            ax.axvspan(outage["start_s"] / 60, outage["end_s"] / 60, color="red", alpha=0.15)
        ax.legend(loc="upper left", fontsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_title(
        "durable-jobs soak: long REPEATABLE READ transaction (orange), Redis down (red)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def section(report: dict[str, Any], command: str, image: Path) -> list[str]:
    m, cap, o = report["machine"], report["capacity"], report["outage"]
    settings = ", ".join(f"`{k}={v}`" for k, v in report["settings"].items())
    lines = [
        BEGIN,
        "## A day of load (`bench/soak.py`, issue 28)",
        "",
        f"Command: `{command}`. Machine: {m['nproc']} cores, {m['cpu']}, {m['memory']}; "
        f"PostgreSQL {m['postgresql']} (a private cluster: {settings}), Redis {m['redis']}.",
        "",
        f"Capacity (closed loop, same run): {cap['jobs_per_s']:,} jobs/s completed; the load "
        f"ran open loop at {report['rate']:,} jobs/s for {report['minutes']:g} min (single "
        "submits from 4 web-like threads plus a `submit_many` producer, half each). A "
        "REPEATABLE READ transaction held a snapshot from "
        f"{_f((report['long_xact']['begin_s'] or 0) / 60)} to "
        f"{_f((report['long_xact']['end_s'] or 0) / 60)} min.",
        "",
        f"![soak](img/{image.name})",
        "",
        "Sweep ms: the relay's sweep as it runs it, the scan floor found from the previous "
        "one and the due rows from there (outbox/floors.py; the slowest sample of the "
        "minute); full walk ms: the same due query from the start of the index, what every "
        "sweep walked before the floors and one sweep a minute walks now.",
        "",
        *table_lines(report),
        "",
        *check_lines(report),
        "",
        "Where the time went, minute by minute: CPU of each process (100 = one core; web is "
        "the driver, whose threads submit as a web server's would), and the database's "
        "busy backends, sampled 20 times a second from `pg_stat_activity` (0.25 = one "
        "backend busy a quarter of the time), with the statements they were busy with:",
        "",
        *time_lines(report),
        "",
        "Every jobs_*/outbox_* relation over 64 kB: its slope over the last half of the "
        "MVCC phase; bytes per live row of its table at the first minute's end and at the "
        "end; bytes per row its table gained before the long transaction and once vacuum "
        "had cleaned up after it:",
        "",
        *growth_lines(report),
        "",
    ]
    if o:
        lines += [
            f"Broker outage: Redis killed at {o['start_s'] / 60:.1f} min for "
            f"{(o['end_s'] - o['start_s']) / 60:.1f} min at load; {o['due_at_return']:,} rows "
            f"due in the outbox when it returned; the first went out after "
            f"{o['first_publish_after_s']:.1f}s (the processes reconnect), the backlog "
            f"at {o['backlog_rows_per_s']:,} rows/s, drained {o['time_to_drain_s']:.1f}s "
            f"after the return ({o['rows_per_s']:,} rows/s published in all, new rows "
            f"included); {o['submit_errors']} failed submits.",
            "",
        ]
    lines.append(END)
    return lines


def splice(doc: str, section: list[str]) -> str:
    """`doc` with its soak section replaced by this one (or added)."""
    return splice_section(doc, SECTION, section, [])
