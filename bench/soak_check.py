"""The soak's end check (bench/soak.py): every accepted job succeeded exactly once, and
when it started and finished (accept->start latency, completions per minute)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Query = Callable[[str, Any], list[tuple[Any, ...]]]


def job_outcomes(
    query: Query, accepted_log: Iterable[tuple[str, float]], started_wall: float
) -> dict[str, Any]:
    """Every accepted job: accept->start latency and finish time, and the exactly-once
    check (state succeeded and exactly one `succeeded` JobEvent; attempts over one counted)."""
    accepted = list(accepted_log)
    ids = [pk for pk, _ in accepted]
    times = [at for _, at in accepted]
    latency: list[tuple[float, float]] = []  # (accepted at, seconds to start)
    finished: list[float] = []
    states: dict[str, int] = {}
    missing = retried = duplicated = unrecorded = 0
    chunk = 5000
    for i in range(0, len(ids), chunk):
        part = ids[i : i + chunk]
        rows = {
            str(pk): (state, start, end, attempt, succeeded)
            for pk, state, start, end, attempt, succeeded in query(
                "SELECT j.id, j.state, EXTRACT(EPOCH FROM j.started_at), "
                "EXTRACT(EPOCH FROM j.finished_at), j.attempt, "
                "(SELECT count(*) FROM jobs_jobevent e "
                " WHERE e.job_id = j.id AND e.to_state = 'succeeded') "
                "FROM jobs_job j WHERE j.id = ANY(%s::uuid[])",
                [part],
            )
        }
        for pk, at in zip(part, times[i : i + chunk], strict=True):
            row = rows.get(pk)
            if row is None:
                missing += 1
                continue
            state, start, end, attempt, succeeded = row
            states[state] = states.get(state, 0) + 1
            retried += int(attempt or 0) > 1
            duplicated += int(succeeded) > 1
            unrecorded += int(succeeded) == 0
            if start is not None:
                latency.append((at - started_wall, float(start) - at))
            if end is not None:
                finished.append(float(end) - started_wall)
    return {
        "accepted": len(ids),
        "states": states,
        "missing": missing,
        "lost": len(ids) - states.get("succeeded", 0),
        "attempts_over_one": retried,
        "succeeded_events_over_one": duplicated,
        "succeeded_events_none": unrecorded,
        "latency": latency,
        "finished": finished,
    }
