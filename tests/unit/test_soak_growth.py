"""The soak's growth check (bench/soak_report.growth) on made-up samples.

A relation fails when it takes more bytes per added row after the long transaction than
before it, or grows while its rows stand still; not when its history was packed tighter.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.soak_report import growth

MB = 1 << 20
MINUTES = 20
HOLD = (300.0, 900.0)  # the long transaction, seconds of the load


def run(
    rows: list[float],
    sizes: dict[str, list[float]],
    table_sizes: list[float] | None = None,
    dead: list[int] | None = None,
) -> dict[str, Any]:
    """A soak result with one sample a minute: `rows` live rows of jobs_job (and `dead` dead
    ones, none by default), and the bytes of each of its indexes."""
    samples = []
    for minute, live in enumerate(rows):
        samples.append(
            {
                "t": 60.0 * minute,
                "tables": {
                    "jobs_job": {
                        "live": live,
                        "dead": (dead or [0] * len(rows))[minute],
                        "bytes": (table_sizes or [600.0 * live for _ in rows])[minute],
                    }
                },
                "indexes": {name: sizes[name][minute] for name in sizes},
                "index_tables": dict.fromkeys(sizes, "jobs_job"),
            }
        )
    return {
        "args": {"bucket_seconds": 60.0, "minutes": MINUTES},
        "long_xact": {"begin_s": HOLD[0], "end_s": HOLD[1]},
        "samples": samples,
    }


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in growth(result)}


ROWS = [100_000.0 + 40_000 * minute for minute in range(MINUTES + 1)]


def sizes_of(per_row: list[float], start: float = 1.0 * MB) -> list[float]:
    """Bytes of an index gaining `per_row[m]` bytes for each row added in minute m."""
    out = [start]
    for minute in range(1, MINUTES + 1):
        out.append(out[-1] + per_row[minute] * (ROWS[minute] - ROWS[minute - 1]))
    return out


def test_history_packed_tighter_is_not_bloat() -> None:
    # 1 MB for the first 100,000 rows (10 B each, group commits sharing a key), then 13 B a
    # row for every row after: the average per row rises all run long, but the index grows
    # at one rate before the long transaction and after it.
    g = by_name(run(ROWS, {"jobs_job_finished_idx": sizes_of([13.0] * (MINUTES + 1))}))[
        "jobs_job_finished_idx"
    ]
    assert g["per_row_ratio"] > 1.1  # what the old check compared
    assert g["per_added_row_before"] == pytest.approx(13.0)
    assert g["per_added_row_after"] == pytest.approx(13.0)
    assert g["ok"] is True


def test_an_index_that_keeps_growing_faster_after_the_hold_fails() -> None:
    per_row = [13.0 if minute * 60 <= HOLD[1] else 20.0 for minute in range(MINUTES + 1)]
    g = by_name(run(ROWS, {"jobs_job_due_idx": sizes_of(per_row)}))["jobs_job_due_idx"]
    assert g["added_ratio"] == pytest.approx(20.0 / 13.0)
    assert g["ok"] is False


def test_a_one_time_residue_of_the_hold_is_bounded() -> None:
    # Three times the bytes a row while the snapshot is held (dead entries stay), then the
    # first rate again: a level, not a slope.
    per_row = [39.0 if HOLD[0] < minute * 60 <= HOLD[1] else 13.0 for minute in range(21)]
    g = by_name(run(ROWS, {"jobs_job_active_created_idx": sizes_of(per_row)}))[
        "jobs_job_active_created_idx"
    ]
    assert g["added_ratio"] == pytest.approx(1.0)
    assert g["ok"] is True


@pytest.mark.parametrize(("grown", "ok"), [(0.5 * MB, True), (5.0 * MB, False)])
def test_rows_standing_still(grown: float, ok: bool) -> None:
    flat = [500_000.0] * (MINUTES + 1)
    size = [
        8.0 * MB + (grown * (minute * 60 - HOLD[1]) / (MINUTES * 60 - HOLD[1]))
        if minute * 60 > HOLD[1]
        else 8.0 * MB
        for minute in range(MINUTES + 1)
    ]
    g = by_name(run(flat, {}, table_sizes=size))["jobs_job"]
    assert g["per_added_row_after"] != g["per_added_row_after"]  # NaN: no rows added
    assert g["grown_after"] == pytest.approx(grown)
    assert g["ok"] is ok


def test_small_relations_are_not_judged() -> None:
    g = by_name(run(ROWS, {"jobs_job_parent_idx": [8192.0 * (1 + m) for m in range(21)]}))
    assert g["jobs_job_parent_idx"]["ok"] is None


def test_after_counts_from_when_vacuum_cleaned_up() -> None:
    # Dead tuples stay high for two minutes after the transaction ends (vacuum at work), and
    # the index still takes 39 B a row meanwhile; then 13 B again, as before the trap.
    cleaned = HOLD[1] + 120
    per_row = [39.0 if HOLD[0] < m * 60 <= cleaned else 13.0 for m in range(MINUTES + 1)]
    dead = [900_000 if HOLD[0] < m * 60 < cleaned else 0 for m in range(MINUTES + 1)]
    g = by_name(run(ROWS, {"jobs_job_due_idx": sizes_of(per_row)}, dead=dead))["jobs_job_due_idx"]
    assert g["added_ratio"] == pytest.approx(1.0)
    assert g["ok"] is True
    # Counted from the transaction's end, the cleaning-up would have been read as bloat.
    early = by_name(run(ROWS, {"jobs_job_due_idx": sizes_of(per_row)}))["jobs_job_due_idx"]
    assert early["ok"] is False


def test_an_index_that_did_not_grow_before_may_not_grow_after() -> None:
    flat_then_growing = [0.0 if m * 60 <= HOLD[1] else 13.0 for m in range(MINUTES + 1)]
    g = by_name(run(ROWS, {"jobs_job_active_created_idx": sizes_of(flat_then_growing)}))[
        "jobs_job_active_created_idx"
    ]
    assert g["per_added_row_before"] == 0.0
    assert g["grown_after"] > 1 * MB
    assert g["ok"] is False


def test_an_index_is_judged_by_the_table_the_catalog_names() -> None:
    # outbox_entry_due_idx does not start with its table's name: the probe's catalog read
    # says which table it is; without it, the index is not judged at all.
    per_row = [13.0 if m * 60 <= HOLD[1] else 30.0 for m in range(MINUTES + 1)]
    result = run(ROWS, {"outbox_entry_due_idx": sizes_of(per_row)})
    assert by_name(result)["outbox_entry_due_idx"]["ok"] is False
    for sample in result["samples"]:
        del sample["index_tables"]
    assert by_name(result)["outbox_entry_due_idx"]["ok"] is None
