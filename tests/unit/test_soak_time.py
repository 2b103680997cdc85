"""The soak's "where the time went" table (bench/soak_report.where_time_went): CPU per process
from the probe's running totals, and busy backends per statement from the sampled sessions."""

from __future__ import annotations

from typing import Any

import pytest

from bench.soak_report import time_lines, where_time_went


def _sample(t: float, **cpu: float) -> dict[str, Any]:
    return {"t": t, "cpu_s": cpu}


def test_cpu_is_each_minutes_difference_over_its_span__busy_is_counts_over_looks() -> None:
    result = {
        "samples": [
            _sample(0.0, web=0.0, worker=0.0, postgres=0.0, autovacuum=0.0),
            _sample(55.0, web=11.0, worker=22.0, postgres=5.5, autovacuum=0.0),
            _sample(115.0, web=23.0, worker=28.0, postgres=35.5, autovacuum=6.0),
        ],
        "active_sessions": {
            "0": {"looks": 100, "seen": {"mark (web) | CPU": 10, "claim (worker) | CPU": 30}},
            "1": {
                "looks": 200,
                "seen": {"mark (web) | CPU": 100, "mark (web) | IO:DataFileRead": 20},
            },
        },
    }

    first, second = where_time_went(result)

    assert first["cpu_pct"] == pytest.approx(
        {"web": 20.0, "worker": 40.0, "postgres": 10.0, "autovacuum": 0.0}
    )
    assert first["busy"] == pytest.approx(0.4)
    assert first["top"] == [("claim (worker)", pytest.approx(0.3)), ("mark (web)", 0.1)]
    assert second["cpu_pct"] == pytest.approx(
        {"web": 20.0, "worker": 10.0, "postgres": 50.0, "autovacuum": 10.0}
    )
    assert second["top"] == [("mark (web)", pytest.approx(0.6))]  # both waits, one statement
    assert "| 1 | 20 / 10 / 50 / 10 | 0.60 | mark (web) 0.60 |" in time_lines({"time": [second]})


def test_a_run_without_cpu_totals_has_no_rows() -> None:  # raw files of older runs
    assert where_time_went({"samples": [{"t": 5.0, "cpu_s": {}}]}) == []
