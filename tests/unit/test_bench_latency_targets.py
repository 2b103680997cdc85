"""The idle latency targets of issue 28 (bench/report.py): accept->start p50 within 1.5 ms of
raw Celery's call->start and at most Procrastinate's accept->start, both from the same run."""

from __future__ import annotations

from typing import Any

from bench.report import _latency_table, targets


def _latency(fast_p50: float, raw_p50: float | None, pro_p50: float | None) -> dict[str, Any]:
    lat: dict[str, Any] = {
        "worker_concurrency": 2,
        "jobs_per_mode": 150,
        "relay_interval_s": 1.0,
        "fast": {"accept_to_start_p50_ms": fast_p50, "accept_to_start_p99_ms": 14.0},
    }
    if raw_p50 is not None:
        lat["raw"] = {"call_to_start_p50_ms": raw_p50, "call_to_start_p99_ms": 9.0}
    if pro_p50 is not None:
        lat["procrastinate"] = {
            f"{name}_{q}_ms": pro_p50
            for name in ("accept_to_start", "submit_call", "return_to_start", "call_to_start")
            for q in ("p50", "p99")
        }
    return lat


def _verdicts(lat: dict[str, Any]) -> dict[str, bool]:
    return {row["name"].split(" (")[0]: row["ok"] for row in targets({"latency": lat})}


def test_within_raw_plus_one_and_a_half_and_under_procrastinate__passes() -> None:
    verdicts = _verdicts(_latency(fast_p50=4.9, raw_p50=3.4, pro_p50=6.0))

    assert verdicts == {
        "idle accept->start p50 <= raw Celery call->start p50 + 1.5 ms": True,
        "idle accept->start p50 <= Procrastinate's": True,
        "idle accept->start p99 <= 25 ms": True,
    }


def test_over_raw_plus_one_and_a_half__fails_even_when_under_procrastinate() -> None:
    verdicts = _verdicts(_latency(fast_p50=5.0, raw_p50=3.4, pro_p50=6.0))

    assert verdicts["idle accept->start p50 <= raw Celery call->start p50 + 1.5 ms"] is False
    assert verdicts["idle accept->start p50 <= Procrastinate's"] is True


def test_slower_than_procrastinate__fails() -> None:
    verdicts = _verdicts(_latency(fast_p50=4.0, raw_p50=3.4, pro_p50=3.9))

    assert verdicts["idle accept->start p50 <= Procrastinate's"] is False


def test_a_run_without_the_baselines__judges_only_what_it_measured() -> None:
    verdicts = _verdicts(_latency(fast_p50=4.0, raw_p50=None, pro_p50=None))

    assert verdicts == {"idle accept->start p99 <= 25 ms": True}


def test_the_table_has_a_procrastinate_row() -> None:
    lines = _latency_table(_latency(fast_p50=4.0, raw_p50=3.4, pro_p50=6.0))

    (row,) = [line for line in lines if line.startswith("| Procrastinate")]
    assert row.split(" | ")[1] == "6.00"
