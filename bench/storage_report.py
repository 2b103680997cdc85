"""The storage scenario's section of docs/benchmarks.md (bench/storage.py); no target of its
own: issue 28 asks for the figure (bytes per job, and what retention brings it to)."""

from __future__ import annotations

from typing import Any

from bench.splice import Section, recorded_alone
from bench.splice import splice as splice_section

SECTION = Section(
    "<!-- storage: begin -->",
    "<!-- storage: end -->",
    "## API submission latency",
    "storage:",
)


def targets(storage: dict[str, Any]) -> list[dict[str, Any]]:
    return []


def table(storage: dict[str, Any], meta: dict[str, Any] | None = None) -> list[str]:
    """The section; with `meta` (a run of this scenario alone) it says which run it was."""
    n, per_job = storage["jobs"], storage["bytes_per_job"]
    lines = [
        SECTION.begin,
        "### 11. Storage: bytes per job, and after retention",
        "",
        *recorded_alone(meta),
    ]
    lines += [
        f"{n:,} noop jobs submitted by `submit_many` and run by a real worker (the batch path), "
        "then `VACUUM`; bytes are the growth of each table (heap and TOAST) and its indexes, "
        "per job (`bench/storage.py`).",
        "",
        "| table | bytes/job | table | indexes | rows/job |",
        "|---|---|---|---|---|",
    ]
    for name, t in sorted(storage["by_table"].items(), key=lambda kv: -kv[1]["total"]):
        lines.append(
            f"| `{name}` | {t['total']:,.0f} | {t['table']:,.0f} | {t['indexes']:,.0f} "
            f"| {t['rows']:.2f} |"
        )
    pruned = storage["pruned"]
    steady = per_job * 100 * 7 * 86400 / 1e9
    lines += [
        f"| **all** | **{per_job:,.0f}** | | | |",
        "",
        f"**What retention brings it to.** Pruning every finished job (`jobs.retention`: "
        f"{pruned['jobs']:,} jobs with their rows, {pruned['kept']} kept) and every published "
        f"outbox row ({pruned['outbox_rows']:,}) leaves "
        f"{storage['bytes_kept_after_prune_per_job']:,.0f} bytes per job in the files: pages "
        "VACUUM keeps for the next rows, not rows (live rows against the start, whose "
        "finished history went too: "
        + (
            ", ".join(f"`{k}` {v:+,}" for k, v in storage["rows_left_after_prune"].items())
            or "none"
        )
        + "). So the tables hold about the retention's worth of jobs: at 100 jobs/s and the "
        f"default 1 day (JOBS_RETENTION_SECONDS and OUTBOX_RETENTION_SECONDS) that is "
        f"{per_job:,.0f} B x 8.64 M jobs = {steady / 7:,.1f} GB; at 7 days, {steady:,.0f} GB.",
        SECTION.end,
    ]
    return lines


def splice(doc: str, section: list[str], checks: list[dict[str, Any]]) -> str:
    return splice_section(doc, SECTION, section, checks)
