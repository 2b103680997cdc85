"""The SQL of the hot database functions, one readable file per function.

Migrations load these files (`sql_file(name)`); `tests/integration/test_sql_files.py` checks that
the migrated database holds exactly what the files say (`pg_proc.prosrc` and the SET clause)
and that every state list in them is a set of `jobs/states.py`. Changing a file therefore
needs a migration that loads it again (`migrations.RunSQL(sql_file("..."))`); the test fails
until there is one. A fresh database runs the earlier migration with the new text too, and
ends in the same place.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

# The functions defined here, by file stem: what the drift test compares.
FUNCTIONS = (
    "jobs_admission_lock",
    "jobs_callback_enqueue",
    "jobs_claim",
    "jobs_claim_lock_keys",
    "jobs_claim_many",
    "jobs_complete_many",
    "jobs_complete_many_hand_over",
    "jobs_dependency_ended",
    "jobs_heartbeat_many",
    "jobs_job_after_state",
)


def sql_file(name: str) -> str:
    """The text of `jobs/sql/<name>.sql`."""
    return (HERE / f"{name}.sql").read_text()
