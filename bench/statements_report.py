"""The statements scenario's target and section of docs/benchmarks.md (bench/statements.py).

A full run renders the section with the others; `run_all.py --only statements --write-docs`
replaces only this section and its target row in the existing doc.
"""

from __future__ import annotations

from typing import Any

from bench.splice import Section, recorded_alone
from bench.splice import splice as splice_section

TARGET_PG_MS = 0.3  # issue 28: >= 3,300 jobs/s per PostgreSQL core with single submits
SECTION = Section(
    "<!-- statements: begin -->",
    "<!-- statements: end -->",
    "### 5. Accept -> start (`Job.created_at` -> the `leased` JobEvent.at)",
    "statements:",
)
SHOWN_MS = 0.001  # statements under this per job are summed in one row


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    ms = res["pg_ms_per_job"]["untracked"]
    return [
        {
            "name": f"{SECTION.target_prefix} PostgreSQL CPU <= {TARGET_PG_MS} ms/job, single "
            f"submits from {res['submitters']} threads (c={res['concurrency']}, fsync on)",
            "value": f"{ms:.3f} ms ({1000 / ms:,.0f} jobs/s per PG core)",
            "ok": ms <= TARGET_PG_MS,
        }
    ]


def _where(s: dict[str, Any]) -> str:
    if s["statement"].startswith("foreign key check"):
        # Django's foreign keys are DEFERRABLE INITIALLY DEFERRED: checked at commit, each
        # check a statement of its own, outside the INSERT's time.
        return "at commit"
    return "sent" if s["toplevel"] else "inside a function"


def _statement_rows(res: dict[str, Any]) -> list[str]:
    top_ms = sum(s["exec_ms_per_job"] for s in res["statements"] if s["toplevel"])
    rows, rest = [], {True: 0.0, False: 0.0}
    for s in res["statements"]:
        if s["exec_ms_per_job"] < SHOWN_MS:
            rest[s["toplevel"]] += s["exec_ms_per_job"]
            continue
        share = f"{100 * s['exec_ms_per_job'] / top_ms:.0f}%" if s["toplevel"] and top_ms else ""
        rows.append(
            f"| {s['statement']} | {_where(s)} | "
            f"{s['calls_per_job']:.3f} | {s['exec_ms_per_job']:.4f} | "
            f"{s['plan_ms_per_job']:.4f} | {s['rows_per_call']:.1f} | "
            f"{s['wal_bytes_per_job']:,.0f} | {share} |"
        )
    for top, ms in rest.items():
        if ms:
            where = "sent" if top else "inside a function"
            rows.append(f"| others under {SHOWN_MS} ms/job | {where} | | {ms:.4f} | | | | |")
    return rows


def table(res: dict[str, Any], meta: dict[str, Any] | None = None) -> list[str]:
    """The section; with `meta` (a run of this scenario alone) it says which run it was."""
    cpu, rates = res["pg_ms_per_job"], res["jobs_per_s"]
    top_ms = sum(s["exec_ms_per_job"] for s in res["statements"] if s["toplevel"])
    wal = sum(s["wal_bytes_per_job"] for s in res["statements"] if s["toplevel"])
    settings = ", ".join(f"{k}={v}" for k, v in sorted(res["settings"].items()))
    lines = [
        SECTION.begin,
        "### 4d. Where a single submit's database time goes (`bench/statements.py`)",
        "",
        *recorded_alone(meta),
    ]
    lines += [
        f"The e2e shape of section 3-4 ({res['submitters']} threads submitting one job a call, "
        f"{res['concurrency']} worker processes consuming meanwhile, {res['jobs_per_round']:,} "
        f"no-op jobs a round) on a private cluster that loads `pg_stat_statements` ({settings}). "
        f"{res['rounds']} rounds with statement tracking off and as many with "
        "`pg_stat_statements.track = all`, alternating. PostgreSQL CPU: the on-CPU time of "
        "the database's backends (bench/pgcpu.py) over a round, divided by its jobs.",
        "",
        "| rounds | jobs/s | PostgreSQL CPU ms/job | per round |",
        "|---|---:|---:|---|",
        f"| tracking off | {rates['untracked']:,.1f} | **{cpu['untracked']:.3f}** | "
        f"{res['pg_ms_rounds']['untracked']} |",
        f"| tracking all | {rates['tracked']:,.1f} | {cpu['tracked']:.3f} | "
        f"{res['pg_ms_rounds']['tracked']} |",
        "",
        f"Jobs per broker message: {res['jobs_per_message']:.2f}. Per job in the tracked "
        f"rounds: the statements sent executed for {top_ms:.3f} ms and wrote {wal:,.0f} B of "
        f"WAL; the backends ran {cpu['tracked']:.3f} ms, so {cpu['tracked'] - top_ms:.3f} ms "
        "went outside every statement's execution (parse, bind, commit and its WAL flush, the "
        "protocol). Execution is wall time inside the executor, lock waits included. A "
        "function's statements are inside its own row's time; the foreign-key checks at "
        "commit are rows of their own (in the sum of sent statements).",
        "",
        "| statement | where | calls/job | exec ms/job | plan ms/job | rows/call | WAL B/job | "
        "share of sent |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *_statement_rows(res),
        "",
        SECTION.end,
    ]
    return lines


def splice(doc: str, section: list[str], checks: list[dict[str, Any]]) -> str:
    """`doc` with its statements section and target row replaced by these (or added)."""
    return splice_section(doc, SECTION, section, checks)
