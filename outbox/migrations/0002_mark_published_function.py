"""outbox_mark_published(ids, counter): the relay's and the fast path's mark, one round trip.

Marks the rows still unpublished (rows another relay marked meanwhile are left alone) and
commits without waiting for the WAL flush: a mark lost in a database crash only republishes,
and the worker's claim absorbs the duplicate. Counting what it marked arrives with the
outbox's own counter table (0003_counter); a database migrated before that counted in a
table of `jobs` until 0003 replaced the function.
"""

from django.db import migrations

FORWARD = """
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
    RETURN marked;
END;
$$;
"""

REVERSE = "DROP FUNCTION IF EXISTS outbox_mark_published(bigint[], text);"


class Migration(migrations.Migration):
    dependencies = [("outbox", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
