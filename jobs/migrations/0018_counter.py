"""The `Signal` model is `Counter`: its table `jobs_signal` becomes `jobs_counter` in place
(values kept), with its constraints, index and identity sequence, and the upsert
`jobs_signal_add` becomes `jobs_counter_add` (jobs.counters). No other database function
calls the upsert. Reversible: each function is created while its table has its name."""

from django.db import migrations, models

UPSERT = """
CREATE OR REPLACE FUNCTION {table}_add(p_name text, p_label text, p_by bigint)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO {table} (name, label, value, updated_at) VALUES (p_name, p_label, p_by, now())
    ON CONFLICT (name, label) DO UPDATE SET value = {table}.value + EXCLUDED.value,
        updated_at = now()
$$;
"""
DROP = "DROP FUNCTION IF EXISTS {table}_add(text, text, bigint);"

# (old name, new name) of what PostgreSQL named after the table.
RENAMES = [
    ("CONSTRAINT", "jobs_signal_unique_name", "jobs_counter_unique_name"),
    ("CONSTRAINT", "jobs_signal_value_check", "jobs_counter_value_check"),
    ("INDEX", "jobs_signal_pkey", "jobs_counter_pkey"),
    ("SEQUENCE", "jobs_signal_id_seq", "jobs_counter_id_seq"),
]


def _rename(what: str, old: str, new: str) -> str:
    if what == "CONSTRAINT":
        return f"ALTER TABLE jobs_counter RENAME CONSTRAINT {old} TO {new};"
    return f"ALTER {what} IF EXISTS {old} RENAME TO {new};"


class Migration(migrations.Migration):
    dependencies = [("jobs", "0017_job_trace_context")]

    operations = [
        migrations.RunSQL(DROP.format(table="jobs_signal"), UPSERT.format(table="jobs_signal")),
        migrations.RenameModel("Signal", "Counter"),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    [_rename(*r) for r in RENAMES],
                    [_rename(what, new, old) for what, old, new in reversed(RENAMES)],
                )
            ],
            state_operations=[
                migrations.RemoveConstraint("counter", "jobs_signal_unique_name"),
                migrations.AddConstraint(
                    "counter",
                    models.UniqueConstraint(
                        fields=["name", "label"], name="jobs_counter_unique_name"
                    ),
                ),
            ],
        ),
        migrations.RunSQL(UPSERT.format(table="jobs_counter"), DROP.format(table="jobs_counter")),
    ]
