"""The outbox's own counters: `outbox_counter` and `outbox_counter_add(name, by)`, and
`outbox_mark_published` counting what it marked there (`relay_published_total`).

Until this migration the mark counted in a table of `jobs`; `jobs` carries that value over
(jobs 0016), so the outbox needs nothing of `jobs` to migrate or to run.
"""

import importlib

from django.db import migrations, models

COUNTER_ADD = """
CREATE OR REPLACE FUNCTION outbox_counter_add(p_name text, p_by bigint)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO outbox_counter (name, value, updated_at) VALUES (p_name, p_by, now())
    ON CONFLICT (name) DO UPDATE SET value = outbox_counter.value + EXCLUDED.value,
        updated_at = now()
$$;
"""

MARK_PUBLISHED = """
CREATE OR REPLACE FUNCTION outbox_mark_published(p_ids bigint[], p_counter text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    marked int;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    -- GREATEST: a web host's clock ahead of the database's must not break the check.
    UPDATE outbox_outboxentry
    SET published_at = GREATEST(now(), created_at), reserved_until = NULL, last_error = ''
    WHERE id = ANY(p_ids) AND published_at IS NULL;
    GET DIAGNOSTICS marked = ROW_COUNT;
    IF marked > 0 THEN
        PERFORM outbox_counter_add(p_counter, marked);
    END IF;
    RETURN marked;
END;
$$;
"""

# Back to the mark that counts nothing (0002's, frozen there).
MARK_PUBLISHED_0002 = importlib.import_module("outbox.migrations.0002_mark_published_function")


class Migration(migrations.Migration):
    dependencies = [("outbox", "0002_mark_published_function")]

    operations = [
        migrations.CreateModel(
            name="Counter",
            fields=[
                ("name", models.CharField(max_length=100, primary_key=True, serialize=False)),
                ("value", models.PositiveBigIntegerField(default=0)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.RunSQL(COUNTER_ADD, "DROP FUNCTION IF EXISTS outbox_counter_add(text, bigint);"),
        migrations.RunSQL(MARK_PUBLISHED, MARK_PUBLISHED_0002.FORWARD),
    ]
