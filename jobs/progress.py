"""Progress a handler reports (`ctx.progress`): validated, throttled, written under the fence.

A report is kept in memory and written at most once per PROGRESS_INTERVAL_SECONDS per job:
the first report writes at once, those within the interval replace the pending value, the
first report after it writes the latest, and the handler's end writes whatever is still
pending (JobContext.run) before the outcome. A job that never reports writes nothing.
Every write is `UPDATE jobs_job ... WHERE id, generation, lease_owner, state='leased'`: a
worker whose lease moved on writes nothing and gets LeaseLost, like its other writes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from .leases import Lease, job_update_if_leased

# At most one progress write per job in this many seconds (a tight loop: about two a second).
PROGRESS_INTERVAL_SECONDS = 0.5
# A longer message is cut to this many characters (it is a status line, not a log).
PROGRESS_MESSAGE_MAX_LENGTH = 200


@dataclass(frozen=True)
class Progress:
    """One report: `done` of `total` (None: unknown) units, and a short message."""

    done: int
    total: int | None
    message: str

    def as_json(self, *, updated_at: str) -> dict[str, Any]:
        """The value of Job.progress (and of the API's `progress`)."""
        return {
            "done": self.done,
            "total": self.total,
            "message": self.message,
            "updated_at": updated_at,
        }


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"progress {name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"progress {name} must be >= 0, not {value}")
    return value


def progress_value(done: object, total: object = None, message: object = "") -> Progress:
    """A validated report: TypeError for a wrong type, ValueError for a value out of range."""
    done = _count(done, "done")
    if total is not None:
        total = _count(total, "total")
        if done > total:
            raise ValueError(f"progress done ({done}) must not exceed total ({total})")
    if not isinstance(message, str):
        raise TypeError(f"progress message must be a str, not {type(message).__name__}")
    # PostgreSQL's jsonb refuses NUL; a status line needs no control characters.
    message = message.replace("\x00", "")[:PROGRESS_MESSAGE_MAX_LENGTH]
    return Progress(done=done, total=total, message=message)


def job_progress_write_if_leased(lease: Lease, progress: Progress) -> None:
    """Store `progress` on the job while this claim holds it; zero rows -> LeaseLost."""
    updated_at = timezone.now().isoformat()
    job_update_if_leased(lease, progress=progress.as_json(updated_at=updated_at))


class ProgressThrottle:
    """The latest report of one job, written at most once per `interval` seconds.

    `write` stores a value (raises LeaseLost when the fence refuses it); `clock` is monotonic
    seconds (injected for tests)."""

    def __init__(
        self,
        write: Callable[[Progress], None],
        *,
        interval: float = PROGRESS_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()  # a handler's own threads may report too
        self._pending: Progress | None = None
        self._written: Progress | None = None
        self._written_at = -math.inf

    @property
    def pending(self) -> Progress | None:
        """The latest report not yet written (None: nothing to flush)."""
        return self._pending

    def report(self, progress: Progress) -> None:
        """Keep `progress`; write it now if the last write is at least `interval` old."""
        with self._lock:
            self._pending = None if progress == self._written else progress
            if self._pending is not None and self._clock() - self._written_at >= self._interval:
                self._flush_locked()

    def flush(self) -> None:
        """Write the pending report, if any, whatever the interval (the handler's end)."""
        with self._lock:
            if self._pending is not None:
                self._flush_locked()

    def _flush_locked(self) -> None:
        progress, self._pending = self._pending, None
        assert progress is not None
        started = self._clock()
        self._write(progress)  # refused: LeaseLost, and nothing more is written by this lease
        self._written, self._written_at = progress, started


def progress_text(value: object) -> str:
    """Job.progress for people (admin, /ops/): `3 / 10 (30%) message`, or `-`."""
    if not isinstance(value, dict) or not isinstance(value.get("done"), int):
        return "-"
    done, total = value["done"], value.get("total")
    if isinstance(total, int) and total > 0:
        text = f"{done} / {total} ({100 * done // total}%)"
    else:
        text = f"{done}" if total is None else f"{done} / {total}"
    message = value.get("message")
    return f"{text} {message}" if isinstance(message, str) and message else text
