"""The per-job PL/pgSQL functions always run their statements with generic (cached) plans.

PL/pgSQL plans a statement with its parameter values five times, then keeps a generic plan
only if its estimated cost is close to theirs. For jobs_claim's statement the estimate
depends on the table's statistics at the time, so some connections kept planning it again
on every call: measured in alternating runs of the same loop, 1.27 vs 0.42 ms of PostgreSQL
CPU per claim, half of it in the planner (`perf`: GetCachedPlan -> standard_planner). Every
statement in these functions looks a job up by key, where the generic plan is the custom one
(`EXPLAIN` of the generic claim: an index scan on jobs_job_pkey), so we ask for it.

A function's SET clause restores only the setting it names when the function returns; the
`synchronous_commit = off` that jobs_claim sets for its own transaction still applies
(tests/integration/test_claim_function.py checks it).

A later CREATE OR REPLACE FUNCTION of one of these resets its settings: repeat the ALTER (or
put the SET clause in the new definition) in that migration.
"""

from django.db import migrations

FUNCTIONS = [
    "jobs_claim(uuid, text, int, text, double precision, int, int)",
    "jobs_complete(uuid, bigint, text, jsonb)",
    "jobs_admission_lock(text[], text, uuid)",
]

FORWARD = "\n".join(f"ALTER FUNCTION {f} SET plan_cache_mode = force_generic_plan;" for f in FUNCTIONS)
REVERSE = "\n".join(f"ALTER FUNCTION {f} RESET plan_cache_mode;" for f in FUNCTIONS)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0010_claim_lock_keys_plpgsql")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
