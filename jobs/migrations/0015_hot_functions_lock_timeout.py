"""Bounded waits in the hot functions: `lock_timeout` in their SET clause, and the heartbeat as
a function of its own (jobs/sql/jobs_heartbeat_many.sql) so that it gets one too.

A claim, completion, hand-over or heartbeat that waits for a row or advisory lock held
elsewhere (an operator's open transaction, a stuck session) fails after 5 s with
`lock_not_available` instead of waiting without end; the delivery's message is requeued (not
acked) and the worker goes on (jobs.gate). `statement_timeout` cannot be bounded the same way:
a function's SET clause does not re-arm the timer of the statement that called it
(docs/operations.md, "Network timeouts").
"""

from django.db import migrations

from jobs.sql import sql_file

FUNCTIONS = [
    "jobs_admission_lock(text[], text, uuid)",
    "jobs_claim(uuid, text, int, text, double precision, int, int)",
    "jobs_claim_many(uuid[], text[], int[], double precision[], text)",
    "jobs_complete_many(uuid[], bigint[], text, int[], jsonb[])",
    "jobs_complete_many_hand_over(uuid[], bigint[], text, int[], jsonb[], text[])",
]

FORWARD = "\n".join(
    [
        sql_file("jobs_admission_lock"),
        sql_file("jobs_claim"),
        sql_file("jobs_claim_many"),
        sql_file("jobs_complete_many"),
        sql_file("jobs_complete_many_hand_over"),
        sql_file("jobs_heartbeat_many"),
    ]
)

REVERSE = "\n".join(
    [f"ALTER FUNCTION {f} RESET lock_timeout;" for f in FUNCTIONS]
    + ["DROP FUNCTION IF EXISTS jobs_heartbeat_many(uuid[], bigint[], double precision[], text);"]
)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0014_drain_sample")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
