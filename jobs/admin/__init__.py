"""Admin: read-only windows on jobs; state changes only through services (quarantine actions).

A job's page shows its event trail, its effect ledger and its quarantine records inline, each
capped at INLINE_ROWS (newest first) with the total and a link to all of them, so the page of
a job with ten thousand events stays fast. A quarantined job can be replayed with corrected
input from a form (`QuarantineRecordAdmin.replay_view`). One module per concern; importing
them registers every model admin.
"""

from jobs.admin import callbacks, job, quarantine, schedule, tables
from jobs.admin.base import INLINE_ROWS

__all__ = ["INLINE_ROWS", "callbacks", "job", "quarantine", "schedule", "tables"]
