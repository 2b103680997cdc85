"""The priority scenario's targets and section of docs/benchmarks.md (bench/priority.py).

A full run renders the section with the others; `run_all.py --only priority --write-docs`
replaces only this section and its target rows in the existing doc.
"""

from __future__ import annotations

from typing import Any

from bench.splice import Section, recorded_alone
from bench.splice import splice as splice_section

TARGET_MIXED_VS_UNIFORM = 0.9
SECTION = Section(
    "<!-- priority: begin -->",
    "<!-- priority: end -->",
    "## API submission latency",
    "priorities:",
)
ORDER = ("high", "default", "low")


def targets(prio: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c, entry in prio["by_concurrency"].items():
        ratio = entry["ratio_mixed_vs_uniform"]
        medians = [entry["bands"][band]["median_start_s"] for band in ORDER]
        out += [
            {
                "name": f"{SECTION.target_prefix} mixed backlog drain >= "
                f"{TARGET_MIXED_VS_UNIFORM}x one priority (c={c})",
                "value": f"{ratio:.2f}x",
                "ok": ratio >= TARGET_MIXED_VS_UNIFORM,
            },
            {
                "name": f"{SECTION.target_prefix} median start high < default < low, "
                f"backlog already in the broker (c={c})",
                "value": " < ".join(f"{m:.2f} s" for m in medians),
                "ok": medians == sorted(medians) and len(set(medians)) == len(medians),
            },
        ]
    return out


def table(prio: dict[str, Any], meta: dict[str, Any] | None = None) -> list[str]:
    """The section; with `meta` (a run of this scenario alone) it says which run it was."""
    lines = [
        SECTION.begin,
        "### 10. Priorities: a mixed backlog already in the broker (`bench/priority.py`)",
        "",
        *recorded_alone(meta),
    ]
    levels = ", ".join(map(str, prio["priorities"]))
    lines += [
        f"{prio['jobs']:,} noop jobs submitted by `submit_many` with the worker down (so the "
        "whole backlog waits in the broker), then drained by one prefork worker; `uniform`: "
        f"every job at priority 0; `mixed`: a third each at {levels}, shuffled. Times per band "
        "are seconds after the round's first claim (medians of "
        "the rounds).",
        "",
        "| c | uniform jobs/s | mixed jobs/s | mixed / uniform | band | first start | "
        "median start | last finish |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c, entry in prio["by_concurrency"].items():
        for i, band in enumerate(ORDER):
            t = entry["bands"][band]
            head = (
                f"| {c} | {entry['uniform_jobs_per_s']:,.0f} | {entry['mixed_jobs_per_s']:,.0f} "
                f"| {entry['ratio_mixed_vs_uniform']:.2f}x "
                if i == 0
                else "| | | | "
            )
            lines.append(
                head + f"| {band} | {t['first_start_s']:.2f} s | {t['median_start_s']:.2f} s "
                f"| {t['last_finish_s']:.2f} s |"
            )
    lines += [
        "",
        "Each band waits in its own broker list (Redis: kombu's priority steps; "
        'docs/architecture.md, "Priorities"), so the worker takes the high band first '
        "whatever the submission order; within a band, messages run in publish order.",
        SECTION.end,
    ]
    return lines


def splice(doc: str, section: list[str], checks: list[dict[str, Any]]) -> str:
    """`doc` with its priority section and target rows replaced by these (or added)."""
    return splice_section(doc, SECTION, section, checks)
