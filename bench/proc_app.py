"""The Procrastinate baseline: a Postgres-only queue with a no-op task on its own database."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

PROC_QUEUE = "bench"

app = App(
    connector=PsycopgConnector(
        conninfo=os.environ.get(
            "BENCH_PROCRASTINATE_DSN",
            "postgresql://postgres@127.0.0.1:5432/dj_bench_procrastinate",
        )
    )
)


@app.task(name="bench.noop", queue=PROC_QUEUE)
async def noop(job_id: str) -> None:
    """Does nothing (async: Procrastinate's cheapest task shape)."""
    return None
