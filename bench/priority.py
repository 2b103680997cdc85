"""Priorities under a backlog (issue 27): time to first start per band, and the drain rate of a
mixed backlog against the same backlog at one priority.

Per concurrency (>= 2), two contenders in alternating rounds, each the durable drain of
bench/backlog.py (N jobs submitted by `jobs.submit_many` in chunks with the workers down; each
chunk's commit publishes its rows from memory, so the whole backlog waits in the broker; then
a worker is started and the queue drained):
  - `uniform`: every job at priority 0, what the drain was before priorities;
  - `mixed`: a third each at -50, 0 and 50, in a shuffled (seeded) submission order, so every
    band's messages are spread through the broker queue when the worker starts.
Drain time: first claim -> last completion, from the database (as bench/backlog.py). For the
mixed round, per band (below 0, 0, above 0): when its first job started, its median start
and when its last job finished, in seconds after the round's first claim.
Targets: the mixed drain >= 0.9x the uniform one (the same round pair); in the mixed round the
high band's median start comes before the default band's, and that one before the low's.
"""

from __future__ import annotations

import random
from typing import Any

from bench.backlog import BROKER_DB, CHUNK, Drain, durable_drain
from bench.infra import db_name, ensure_database, median, pg_connect
from bench.scenarios import Bench, bench_owner, log, use_target

PRIORITIES = (-50, 0, 50)
BANDS = {-1: "low", 0: "default", 1: "high"}
SEED = 27


def mixed_requests(owner: Any, n: int) -> list[dict[str, Any]]:
    """N noop requests, a third at each of PRIORITIES, in a seeded shuffled order."""
    priorities = [PRIORITIES[i % len(PRIORITIES)] for i in range(n)]
    random.Random(SEED).shuffle(priorities)
    return [{"kind": "noop", "input": {}, "owner": owner, "priority": p} for p in priorities]


def submit_mixed(owner: Any, n: int) -> None:
    import jobs

    requests = mixed_requests(owner, n)
    for start in range(0, n, CHUNK):
        jobs.submit_many(requests[start : start + CHUNK])


_BANDS_SQL = """
WITH starts AS (
    SELECT j.id, sign(j.priority)::int AS band, j.finished_at, min(e.at) AS started
    FROM jobs_job j JOIN jobs_jobevent e ON e.job_id = j.id AND e.to_state = 'leased'
    WHERE j.lease_owner IS DISTINCT FROM 'bench-fill'
    GROUP BY j.id
), first AS (SELECT min(started) AS t0 FROM starts)
SELECT band, count(*),
       extract(epoch FROM min(started) - t0),
       extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY started - t0)),
       extract(epoch FROM max(finished_at) - t0)
FROM starts, first
GROUP BY band, t0
ORDER BY band DESC
"""


def band_timings(db: str) -> dict[str, dict[str, float]]:
    """Per band of the round just drained: jobs, first start, median start, last finish."""
    with pg_connect(db) as conn:
        rows = conn.execute(_BANDS_SQL).fetchall()
    return {
        BANDS[int(band)]: {
            "jobs": int(count),
            "first_start_s": float(first),
            "median_start_s": float(middle),
            "last_finish_s": float(last),
        }
        for band, count, first, middle, last in rows
    }


def scenario_priority(b: Bench) -> dict[str, Any]:
    """Per concurrency (>= 2): uniform and mixed drains of b.backlog jobs, rounds alternated."""
    db = db_name("backlog")
    ensure_database(db)
    use_target(db, b.broker(BROKER_DB))
    owner = bench_owner()
    n = b.backlog
    out: dict[str, Any] = {"jobs": n, "priorities": list(PRIORITIES), "by_concurrency": {}}
    for c in [c for c in b.concurrencies if c >= 2] or [2]:
        log(f"  priority: concurrency {c}, {n} jobs")
        uniform: list[Drain] = []
        mixed: list[Drain] = []
        bands: list[dict[str, dict[str, float]]] = []
        for r in range(b.rounds):
            for name in ("uniform", "mixed") if r % 2 == 0 else ("mixed", "uniform"):
                if name == "uniform":
                    result = durable_drain(b, db, owner, n, c, analyze=False, name=name)
                    uniform.append(result)
                else:
                    result = durable_drain(
                        b, db, owner, n, c, analyze=False, submit=submit_mixed, name=name
                    )
                    mixed.append(result)
                    bands.append(band_timings(db))
                extra = ""
                if name == "mixed":
                    extra = "  " + "  ".join(
                        f"{band}: first {t['first_start_s']:.2f}s median "
                        f"{t['median_start_s']:.2f}s last {t['last_finish_s']:.2f}s"
                        for band, t in bands[-1].items()
                    )
                log(f"    {name:8s} drain {result.jobs_per_s:8.1f} jobs/s{extra}")
        out["by_concurrency"][str(c)] = {
            "uniform_jobs_per_s": median([d.jobs_per_s for d in uniform]),
            "mixed_jobs_per_s": median([d.jobs_per_s for d in mixed]),
            "ratio_mixed_vs_uniform": median(
                [m.jobs_per_s / u.jobs_per_s for m, u in zip(mixed, uniform, strict=True)]
            ),
            "bands": {
                band: {key: median([r[band][key] for r in bands]) for key in bands[0][band]}
                for band in bands[0]
            },
            "rounds": b.rounds,
        }
    use_target(db_name("main"), b.broker())
    return out
