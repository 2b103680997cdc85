"""The table-size scenario's targets and section of docs/benchmarks.md (bench/scenarios.py,
`scenario_scale`: 10k against BENCH_SCALE_ROWS finished jobs, 10 M by default).

A full run renders the section with the others; `run_all.py --only scale --write-docs`
replaces only this section and its target rows in the existing doc.
"""

from __future__ import annotations

from typing import Any

from bench.splice import Section, recorded_alone
from bench.splice import splice as splice_section

TARGET_SCALE = 0.9
SECTION = Section(
    "<!-- scale: begin -->",
    "<!-- scale: end -->",
    "### 7. Serialization keys over many keys vs none",
    "growth:",
)


def targets(scale: dict[str, Any]) -> list[dict[str, Any]]:
    big = scale.get("big", "1m")
    ratio = scale[f"ratio_{big}_vs_10k"]
    return [
        {
            "name": f"{SECTION.target_prefix} {big.upper()}-row table >= {TARGET_SCALE}x the "
            "10k-row throughput",
            "value": f"{ratio:.2f}x",
            "ok": ratio >= TARGET_SCALE,
        }
    ]


def table(scale: dict[str, Any], meta: dict[str, Any] | None = None) -> list[str]:
    """The section; with `meta` (a run of this scenario alone) it says which run it was."""
    big = scale.get("big", "1m")
    lines = [
        SECTION.begin,
        f"### 6. Table size: 10k vs {big.upper()} finished jobs already in `jobs_job`",
        "",
        *recorded_alone(meta, " (the table filled once, kept between runs)"),
    ]
    lines += [
        f"Durable e2e, {scale['concurrency']} worker processes per database, "
        f"{scale.get('submitters', 1)} submitting threads, "
        f"{scale['jobs_per_round']} jobs per round, the two databases interleaved.",
        "",
        "| rows in jobs_job | jobs/s | per-round |",
        "|---:|---:|---|",
        f"| {scale['rows']['10k']:,} | {scale['10k_jobs_per_s']:,.1f} | {scale['rounds']['10k']} |",
        f"| {scale['rows'][big]:,} | {scale[f'{big}_jobs_per_s']:,.1f} | {scale['rounds'][big]} |",
        "",
        f"Ratio {big.upper()} / 10k: **{scale[f'ratio_{big}_vs_10k']:.2f}x** (median of "
        "per-round ratios).",
    ]
    lines += ["", SECTION.end]
    return lines


def splice(doc: str, section: list[str], checks: list[dict[str, Any]]) -> str:
    """`doc` with its scale section and target rows replaced by these (or added)."""
    return splice_section(doc, SECTION, section, checks)
