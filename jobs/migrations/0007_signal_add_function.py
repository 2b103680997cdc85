"""jobs_signal_add(name, label, by): add to a cross-process counter (jobs.signals).

A function so that other database functions (the outbox's mark) count in the same statement.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION jobs_signal_add(p_name text, p_label text, p_by bigint)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO jobs_signal (name, label, value, updated_at) VALUES (p_name, p_label, p_by, now())
    ON CONFLICT (name, label) DO UPDATE SET value = jobs_signal.value + EXCLUDED.value,
        updated_at = now()
$$;
"""

REVERSE = "DROP FUNCTION IF EXISTS jobs_signal_add(text, text, bigint);"


class Migration(migrations.Migration):
    dependencies = [("jobs", "0006_claim_complete_functions")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
