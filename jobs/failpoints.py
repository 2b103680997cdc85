"""The worker's named crash points (JOBS_FAILPOINTS; the mechanism is outbox.failpoints).

Each name matches a numbered step of a crash-window docstring and a row of
docs/failure-modes.md.
"""

from __future__ import annotations

from outbox.failpoints import FailpointTriggered, configure, failpoint, failpoints_add

NAMES = frozenset(
    {
        "worker.after_claim",
        "worker.batch_after_claim",
        "worker.batch_before_commit",
        "worker.after_effect_before_complete",
        "worker.after_complete_before_ack",
        # The ticker (jobs.scheduler): a tick's jobs submitted, the cursor not yet moved.
        "schedule.after_submit_before_advance",
    }
)

failpoints_add(NAMES)

__all__ = ["NAMES", "FailpointTriggered", "configure", "failpoint"]
