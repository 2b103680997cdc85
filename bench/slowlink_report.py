"""The slow-link scenario's targets and section of docs/benchmarks.md (bench/slowlink.py).

A full run renders the section with the others; `run_all.py --only slowlink --write-docs`
(`make bench-slow-link`) replaces only this section and its target rows in the existing doc.
"""

from __future__ import annotations

import math
from typing import Any

from bench.splice import Section
from bench.splice import splice as splice_section

TARGET_SLOW_VS_RAW = 3.0
TARGET_SLOW_VS_OWN = 0.8
BEGIN, END = "<!-- slowlink: begin -->", "<!-- slowlink: end -->"
TARGET_PREFIX = "slow link:"
INSERT_BEFORE = "## API submission latency"

LABELS = {
    "direct": "direct (no proxy)",
    "proxy0": "proxies, 0 ms",
    "proxy1": "proxies, 1 ms each way",
}


def _f(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:,.{digits}f}"


def runs(slow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each concurrency's rows and ratios (a result of before the concurrencies: its one)."""
    if "runs" in slow:
        return slow["runs"]
    return {str(slow["concurrency"]): {"by_link": slow["by_link"], "ratios": slow["ratios"]}}


def targets(slow: dict[str, Any]) -> list[dict[str, Any]]:
    ms, out = slow["delay_ms"], []
    for c, run in runs(slow).items():
        ratios = run["ratios"]
        vs_raw = ratios["durable_slow_vs_raw_slow"]
        vs_own = ratios["durable_slow_vs_durable_proxy0"]
        out += [
            {
                "name": f"{TARGET_PREFIX} durable drain >= {TARGET_SLOW_VS_RAW:.0f}x raw Celery, "
                f"both {ms:g} ms each way (c={c})",
                "value": f"{vs_raw:.2f}x",
                "ok": vs_raw >= TARGET_SLOW_VS_RAW,
            },
            {
                "name": f"{TARGET_PREFIX} durable drain at {ms:g} ms each way >= "
                f"{TARGET_SLOW_VS_OWN}x its own through the proxies at 0 ms (c={c})",
                "value": f"{vs_own:.2f}x",
                "ok": vs_own >= TARGET_SLOW_VS_OWN,
            },
        ]
    return out


def _breakdown(run: dict[str, Any], key: str, kind: str) -> list[str]:
    rows = run["by_link"][key].get(f"{kind}_by_label") or []
    # per message: the numbers a reader can add up; the long tail (start-up, idle polls) cut
    k = run["by_link"][key]["jobs_per_message"]
    return [f"  - {per_job * k:.2f}: `{label}`" for label, per_job in rows if per_job * k >= 0.01]


def table(slow: dict[str, Any], meta: dict[str, Any] | None = None) -> list[str]:
    """The section; with `meta` (a run of this scenario alone) it says which run it was."""
    rtt, all_runs = slow["round_trip_ms"], runs(slow)
    tuned = (slow.get("tuned") or {}).get("key")
    cs = [c for c in all_runs if c != tuned]
    lines = [
        BEGIN,
        "### 9. Slow links: the backlog drain 1 ms away (`bench/slowlink.py`)",
        "",
    ]
    if meta is not None:
        lines += [
            f"Recorded alone by `{meta['command'].strip()}` (`make bench-slow-link`) on "
            f"{meta['date']}, {meta['elapsed_s']:.0f} s, load average at start "
            f"{meta['machine']['load_at_start']}; the rest of this file is from the run above.",
            "",
        ]
    lines += [
        f"The drain of section 8 ({_jobs(slow)} queued, then one worker of "
        f"concurrency {' or '.join(cs)} started; durable with `submit_many` and messages of "
        f"up to {slow['batch_max']} jobs, raw Celery one message per task"
        + (
            f"; and the slow-link setting of docs/operations.md, concurrency "
            f"{slow['tuned']['concurrency']} with messages of up to "
            f"{slow['tuned']['batch_max']} jobs, `c={tuned}` below"
            if tuned
            else ""
        )
        + ") over three links "
        f"(the direct one at c={cs[0]} only, for context), every contender x link pair of "
        f"each concurrency taking turns, {slow['rounds']} rounds, order rotated. "
        "Behind the proxies, the driver (submits, fast-path publishes) and the worker are "
        "two hosts, each with its own FaultProxy (`tests/network/proxy.py`) to PostgreSQL and "
        "to Redis; every connection of the contender's processes goes through them (the "
        "bench's own counters go direct). The proxies run in the driver process, sharing "
        "this machine's 2 cores with everything else."
        + (
            " Durable drains section 8's whole backlog, so the worker's start (the ramp "
            "column) is a small part of its window; raw Celery, one message a task, drains "
            "at an even rate from its first task, and its rounds under latency take the "
            "longest."
            if slow.get("raw_jobs", slow["jobs"]) != slow["jobs"]
            else ""
        ),
        "",
        "Round trips measured (median of 50, `SELECT 1` / `PING` through the worker's "
        "proxies): "
        + "; ".join(
            f"{LABELS[k]} {v['postgres_ms']:.2f} / {v['redis_ms']:.2f} ms" for k, v in rtt.items()
        )
        + ".",
        "",
        "Round trips per job: chunks the worker's proxies forwarded upstream from the worker's "
        "spawn to its stop (start-up and idle polls included), divided by the jobs; a client "
        "that waits for each answer sends one chunk per round trip (a pipeline is one). "
        "Submit round trips: the driver's proxies over the whole round. Message busy / gap "
        "(durable): per pool process, the median time from a message's claim to its group "
        "commit, and from the previous message's commit to this claim. Ramp (durable): "
        "from the drain's first claim to the last pool process's first claim, the worker's "
        "start inside the drain window.",
        "",
        "| c | link | contender | jobs/s (drain) | worker PG round trips/job | worker Redis "
        "round trips/job | submit PG / Redis round trips/job | commits/job | jobs/message | "
        "worker CPU ms/job | proxy CPU ms/job | message busy / gap ms | ramp ms |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c, run in all_runs.items():
        for link in ("direct", "proxy0", "proxy1"):
            for contender, name in (("durable", "durable"), ("raw_celery", "raw Celery")):
                row = run["by_link"].get(f"{contender}_{link}")
                if row is not None:
                    lines.append(f"| {c} | {LABELS[link]} | {name} | {_row(row)}")
    lines += ["", "Ratios (medians of per-round ratios):", ""]
    for c, run in all_runs.items():
        r = run["ratios"]
        lines += [
            f"- c={c}: durable / raw Celery, both 1 ms each way: "
            f"**{r['durable_slow_vs_raw_slow']:.2f}x** (through the proxies at 0 ms: "
            f"{r['durable_proxy0_vs_raw_proxy0']:.2f}x); durable at 1 ms / at 0 ms: "
            f"**{r['durable_slow_vs_durable_proxy0']:.2f}x**; raw Celery at 1 ms / at 0 ms: "
            f"{r['raw_slow_vs_raw_proxy0']:.2f}x",
        ]
        if "durable_proxy0_vs_direct" in r:
            lines.append(
                f"- c={c}: the proxies themselves (0 ms / direct): durable "
                f"{r['durable_proxy0_vs_direct']:.2f}x, raw Celery {r['raw_proxy0_vs_direct']:.2f}x"
            )
    lines += [
        "",
        "Per-round drain throughput (jobs/s): "
        + "; ".join(
            f"c={c} {key} {row['rounds']}"
            for c, run in all_runs.items()
            for key, row in run["by_link"].items()
        ),
        "",
        "Where the worker's round trips go at 1 ms (per message, the most frequent first, "
        "those under 0.01 left out; a PostgreSQL chunk is named by the statement it carries, "
        "a Redis chunk by its commands; `(other)`: a chunk that starts inside a command, the "
        f"rest of a write that reached the proxy in two reads), at c={cs[0]}:",
        "",
    ]
    first = all_runs[cs[0]]
    for key, name in (("durable_proxy1", "durable"), ("raw_celery_proxy1", "raw Celery")):
        for kind, what in (("pg", "PostgreSQL"), ("redis", "Redis")):
            rows = _breakdown(first, key, kind)
            if rows:
                lines += [f"- {name}, {what}:", *rows]
    plain = {c: run for c, run in all_runs.items() if c != tuned}
    lines += ["", *_findings(slow, cs[0], first), *_concurrency(plain)]
    if tuned:
        lines += _tuned(slow, plain, all_runs[tuned])
    lines += ["", END, ""]
    return lines


def _row(row: dict[str, Any]) -> str:
    submit = cycle = ""
    if "message_busy_ms" in row:
        cycle = f"{row['message_busy_ms']:.1f} / {row['message_gap_ms']:.1f}"
    ramp = _f(row.get("ramp_ms"))
    if "submit_pg_round_trips_per_job" in row:
        submit = (
            f"{row['submit_pg_round_trips_per_job']:.3f} / "
            f"{row['submit_redis_round_trips_per_job']:.3f}"
        )
    return (
        f"{_f(row['jobs_per_s'])} | {_f(row.get('pg_round_trips_per_job'), 3)} | "
        f"{_f(row.get('redis_round_trips_per_job'), 3)} | {submit} | "
        f"{_f(row.get('db_commits_per_job'), 3)} | {_f(row['jobs_per_message'])} | "
        f"{_f(row['worker_cpu_ms_per_job'], 2)} | "
        f"{_f(row.get('proxy_cpu_ms_per_job'), 3)} | {cycle} | {ramp} |"
    )


def _jobs(slow: dict[str, Any]) -> str:
    """How many jobs each contender drained (one count for both in results before raw_jobs)."""
    raw = slow.get("raw_jobs", slow["jobs"])
    if raw == slow["jobs"]:
        return f"{slow['jobs']:,} no-op jobs"
    return f"{slow['jobs']:,} no-op jobs for durable and {raw:,} for raw Celery"


def _concurrency(all_runs: dict[str, dict[str, Any]]) -> list[str]:
    """What more pool processes do to the latency (when more than one concurrency ran)."""
    if len(all_runs) < 2:
        return []
    items = list(all_runs.items())
    (c0, lo), (c1, hi) = items[0], items[-1]
    lo_by, hi_by = lo["by_link"], hi["by_link"]
    own0, own1 = (x["ratios"]["durable_slow_vs_durable_proxy0"] for x in (lo, hi))
    raw0, raw1 = (x["raw_celery_proxy1"]["jobs_per_s"] for x in (lo_by, hi_by))
    return [
        "",
        f"**{'More processes hide' if own1 > own0 else 'More processes did not hide'} the "
        f"latency.** At c={c1} a message's round trips still "
        f"cost each pool process the same serial wait, but {c1} processes wait at once: at "
        f"0 ms the durable drain ran {_f(hi_by['durable_proxy0']['jobs_per_s'])} jobs/s "
        f"(c={c0}: {_f(lo_by['durable_proxy0']['jobs_per_s'])}; the worker, PostgreSQL, Redis "
        "and the proxies share 2 cores), at 1 ms "
        f"{_f(hi_by['durable_proxy1']['jobs_per_s'])} (c={c0}: "
        f"{_f(lo_by['durable_proxy1']['jobs_per_s'])}): {own1:.2f}x of its own 0 ms rate "
        f"against {own0:.2f}x at c={c0}. Raw Celery "
        + ("gains too" if raw1 > raw0 * 1.05 else "does not gain")
        + f" ({_f(raw1)} jobs/s at 1 ms, c={c0}: {_f(raw0)}): its 3 round trips a task "
        "are made by Celery's main process, one after the other, whatever the concurrency. "
        "A worker host across a slow link should run more processes than cores "
        '(docs/operations.md, "Slow links").',
    ]


def _tuned(slow: dict[str, Any], plain: dict[str, Any], run: dict[str, Any]) -> list[str]:
    """The slow-link setting's run against the defaults' largest concurrency."""
    t = slow["tuned"]
    c_hi, hi = list(plain.items())[-1]
    by, hi_by = run["by_link"], hi["by_link"]
    own, own_hi = (x["ratios"]["durable_slow_vs_durable_proxy0"] for x in (run, hi))
    d1 = by["durable_proxy1"]
    k = d1["jobs_per_message"]
    return [
        "",
        f"**The slow-link setting: more jobs a message.** Past c={c_hi} more processes stop "
        "helping at 1 ms: Celery's main process takes one message at a time from Redis (its "
        "`BRPOP`, then kombu's unacked write before the pool gets it, each a round trip), so "
        "a worker delivers at most one message per two round trips however many processes "
        "wait for one. More jobs a message divide that. At concurrency "
        f"{t['concurrency']} with `OUTBOX_BATCH_MAX={t['batch_max']}` ({k:.0f} jobs a "
        f"message; {d1['pg_round_trips_per_job']:.3f} PostgreSQL and "
        f"{d1['redis_round_trips_per_job']:.3f} Redis round trips per job) the durable drain "
        f"ran {_f(by['durable_proxy0']['jobs_per_s'])} jobs/s at 0 ms and "
        f"{_f(d1['jobs_per_s'])} at 1 ms: **{own:.2f}x** of its own 0 ms rate (defaults at "
        f"c={c_hi}: {own_hi:.2f}x, {_f(hi_by['durable_proxy1']['jobs_per_s'])} jobs/s at "
        f"1 ms), and {run['ratios']['durable_slow_vs_raw_slow']:.2f}x raw Celery at the "
        "same concurrency and latency."
        + _ramp(by)
        + " The cost of the setting: the rows of one publish "
        "call go out in fewer messages (150 rows make 2 messages of 75 instead of 8 of 19 "
        "at 20), so a small backlog feeds fewer processes, and a message's jobs run one "
        'after another in one process (docs/operations.md, "Slow links").',
    ]


def _ramp(by: dict[str, Any]) -> str:
    """The worker's start at each link, when the run measured it."""
    r0, r1 = (by[k].get("ramp_ms") for k in ("durable_proxy0", "durable_proxy1"))
    if r0 is None or r1 is None:
        return ""
    return (
        f" The worker's start inside the window: its last pool process claimed its first "
        f"message {_f(r1)} ms after the first one did at 1 ms ({_f(r0)} ms at 0 ms)."
    )


def _findings(slow: dict[str, Any], c: str, run: dict[str, Any]) -> list[str]:
    """Where the durable drain's time goes at 1 ms at concurrency `c`, from this run's numbers."""
    by, r = run["by_link"], run["ratios"]
    d0, d1, z1 = by["durable_proxy0"], by["durable_proxy1"], by["raw_celery_proxy1"]
    k = d1["jobs_per_message"]
    pg, rd = d1["pg_round_trips_per_job"] * k, d1["redis_round_trips_per_job"] * k
    rtt = slow["round_trip_ms"]["proxy1"]
    rtt_ms = (rtt["postgres_ms"] + rtt["redis_ms"]) / 2
    cycle0 = d0["message_busy_ms"] + d0["message_gap_ms"]
    cycle1 = d1["message_busy_ms"] + d1["message_gap_ms"]
    verdict = "meets" if r["durable_slow_vs_durable_proxy0"] >= TARGET_SLOW_VS_OWN else "misses"
    allowed = cycle0 / TARGET_SLOW_VS_OWN - cycle0  # ms a message may gain at the target
    return [
        f"**Where the time goes (c={c}).** "
        f"Raw Celery makes {z1['redis_round_trips_per_job']:.1f} Redis round trips per task "
        "(`BRPOP`, kombu's unacked store, the ack), each on the critical path of one task: "
        f"under latency it falls to {r['raw_slow_vs_raw_proxy0']:.2f}x. A durable message "
        f"of {k:.0f} jobs costs the worker {pg:.1f} PostgreSQL and {rd:.1f} Redis round trips "
        f"({pg + rd:.1f} in all, about {(pg + rd) * rtt_ms:.0f} ms at the measured "
        f"{rtt_ms:.1f} ms), and they are serial: a pool process claims (1), completes "
        "(1: a group commit of plain successes is `jobs_complete_many` alone in autocommit; "
        "with a retry, a quarantine or a keyed hand-over in the batch it is a transaction, "
        "and psycopg's `BEGIN` and `COMMIT` add a round trip each), then Celery's main "
        "process acks, "
        "`BRPOP`s the next message and writes kombu's unacked entry (its `MULTI ... EXEC` "
        "leaves in two writes, counted twice, one round trip) before the process gets it; "
        "with prefetch 1 nothing overlaps that. Per pool process a message took "
        f"{d1['message_busy_ms']:.1f} ms from claim to completion and "
        f"{d1['message_gap_ms']:.1f} ms from one completion to the next claim at 1 ms "
        f"({cycle1:.0f} ms a message), against {d0['message_busy_ms']:.1f} + "
        f"{d0['message_gap_ms']:.1f} = {cycle0:.0f} ms through the same proxies at 0 ms. "
        f"The latency added {cycle1 - cycle0:.0f} ms to each message; "
        f"{TARGET_SLOW_VS_OWN}x allows {allowed:.0f} ms, about {allowed / rtt_ms:.1f} serial "
        f"round trips. So the drain {verdict} the target "
        f"({r['durable_slow_vs_durable_proxy0']:.2f}x): batching already divides the round "
        f"trips by {k:.0f}, but the {pg + rd:.0f} a message still makes are serial, and its "
        f"whole cycle without latency is only {cycle0:.0f} ms. The group commit's `BEGIN` "
        "and `COMMIT` are gone already (4 PostgreSQL round trips a message before, 2 now: "
        "it raised both drains, not their ratio, since the Redis side dominates). What "
        "would take most of the rest off one process's critical path: a second message "
        "prefetched per process on the batch queue, so the ack and the next delivery "
        "overlap the work (3 Redis round trips). Tried on 2026-12-03 (prefetch 2 on a "
        "worker whose jobs queue carries batch kinds alone, the time limit counted twice; "
        "branch `slowlink-prefetch2`) in 15 interleaved rounds of this drain: at 1 ms it ran "
        "1.14x the prefetch-1 drain at c=2 (median; 0.90-1.70x) and 0.94x at c=4 "
        "(0.75-1.42x); its own 1 ms / 0 ms ratio was 0.76x at c=2 and 0.66x at c=4 "
        "(prefetch 1 in the same rounds: 0.60x, 0.62x). Not made: it misses the target, and "
        "more processes gain as much with no message waiting behind a running one (the "
        "worker refuses a prefetch above 1 for a jobs queue). The claim and the group commit "
        "(2 PostgreSQL round trips a message, serial in the pool process) and the main "
        "process's synchronous ack and unacked write stay serial whatever the "
        "prefetch. More processes overlap the waits (below); the machine's 2 cores, "
        "shared by the worker, PostgreSQL, Redis and the proxies, are the other limit "
        f"(worker CPU per job {d0['worker_cpu_ms_per_job']:.2f} ms at 0 ms, "
        f"{d1['worker_cpu_ms_per_job']:.2f} at 1 ms; the proxies' "
        f"{d0['proxy_cpu_ms_per_job']:.3f} and {d1['proxy_cpu_ms_per_job']:.3f}).",
        "",
        "**The proxy's own cost.** The proxy is Python (asyncio) in the driver process: "
        f"a round trip through it at 0 ms took {_rtt(slow, 'proxy0')} against "
        f"{_rtt(slow, 'direct')} direct, and it spent "
        f"{by['raw_celery_proxy0']['proxy_cpu_ms_per_job']:.2f} ms of CPU per raw task "
        f"({d0['proxy_cpu_ms_per_job']:.2f} per durable job) on this 2-core machine. Raw "
        f"Celery, 3 round trips a task, drains at {r['raw_proxy0_vs_direct']:.2f}x of its "
        f"direct rate through it, durable at {r['durable_proxy0_vs_direct']:.2f}x: the proxy "
        "costs raw Celery more, which is why both targets compare runs through the same "
        "proxies. At 1 ms it is not the limit: raw Celery's proxy CPU is "
        f"{z1['proxy_cpu_ms_per_job'] * z1['jobs_per_s'] / 10:.0f}% of one core.",
    ]


def _rtt(slow: dict[str, Any], link: str) -> str:
    v = slow["round_trip_ms"][link]
    return f"{v['postgres_ms']:.2f} / {v['redis_ms']:.2f} ms (PostgreSQL / Redis)"


SECTION = Section(BEGIN, END, INSERT_BEFORE, TARGET_PREFIX)


def splice(doc: str, section: list[str], checks: list[dict[str, Any]]) -> str:
    """`doc` with its slow-link section and target rows replaced by these (or added)."""
    return splice_section(doc, SECTION, section, checks)
