"""Batched claims and completions; the hot functions' SQL now lives in jobs/sql/*.sql.

- jobs_claim_many: one statement leases every plain job of a batch message (no attempt
  charged until its handler starts; jobs/sql/jobs_claim_many.sql).
- jobs_complete_many: the fenced completion of many jobs in one statement; the single path
  calls it with one job. `jobs_complete` (migration 0006) is no longer called, but it stays
  for this release: workers of the previous release still call it during a rolling deploy.
  A later release's migration drops it.
- jobs_claim, jobs_admission_lock and jobs_claim_lock_keys are loaded again from their files,
  with `plan_cache_mode` in their SET clause (migration 0011 set it with ALTER FUNCTION).
"""

from django.db import migrations

from jobs.sql import sql_file

FORWARD = "\n".join(
    [
        sql_file("jobs_claim_lock_keys"),
        sql_file("jobs_claim"),
        # Migration 0009 created it from its own copy; the file's result columns have changed
        # since (0024: `priority`), which CREATE OR REPLACE cannot do. On a database that ran
        # this migration before, the DROP never runs: 0024 makes the same change there.
        "DROP FUNCTION IF EXISTS jobs_admission_lock(text[], text, uuid);",
        sql_file("jobs_admission_lock"),
        sql_file("jobs_claim_many"),
        sql_file("jobs_complete_many"),
    ]
)

# Back to 0011: no batch functions (the other three are the same functions as before).
REVERSE = """
DROP FUNCTION IF EXISTS jobs_claim_many(uuid[], text[], int[], double precision[], text);
DROP FUNCTION IF EXISTS jobs_complete_many(uuid[], bigint[], text, int[], jsonb[]);
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0011_hot_functions_generic_plans")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
