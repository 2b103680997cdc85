"""`relay_published_total` moves from `jobs_signal` to the outbox's own counter table.

Since outbox 0003 the outbox's mark counts in `outbox_counter`; this adds the value `jobs_signal`
held (a database migrated before) to it and removes the old row, so /metrics reports
`jobs_relay_published_total` from one place, without a step back. A mark counted between the
two migrations is kept: the values are added, not replaced.
"""

from django.db import migrations

FORWARD = """
INSERT INTO outbox_counter (name, value, updated_at)
SELECT name, SUM(value), MAX(updated_at) FROM jobs_signal
WHERE name = 'relay_published_total' GROUP BY name
ON CONFLICT (name) DO UPDATE SET value = outbox_counter.value + EXCLUDED.value,
    updated_at = GREATEST(outbox_counter.updated_at, EXCLUDED.updated_at);
DELETE FROM jobs_signal WHERE name = 'relay_published_total';
"""

REVERSE = """
INSERT INTO jobs_signal (name, label, value, updated_at)
SELECT name, '', value, updated_at FROM outbox_counter WHERE name = 'relay_published_total'
ON CONFLICT (name, label) DO UPDATE SET value = jobs_signal.value + EXCLUDED.value,
    updated_at = GREATEST(jobs_signal.updated_at, EXCLUDED.updated_at);
DELETE FROM outbox_counter WHERE name = 'relay_published_total';
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0015_hot_functions_lock_timeout"), ("outbox", "0003_counter")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
