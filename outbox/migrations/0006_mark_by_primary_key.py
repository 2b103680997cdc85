"""`outbox_mark_published` looks its ids up by primary key, whatever the statistics say.

Its UPDATE said `WHERE id = ANY(p_ids) AND published_at IS NULL`. That condition proves the
predicate of the partial indexes of due rows (`published_at IS NULL`), and with the outbox
quiet (a few hundred rows due) the planner scanned such an index whole, filtering by id,
instead of looking the ids up. Under a held xmin horizon that index keeps an entry for every
row published since the horizon was held (VACUUM may not remove them), so each mark walked all
of them: in the soak (docs/benchmarks.md, "A day of load") the marks' share of the database's
busy time grew 12x over a 6-minute hold and the accept->start p99 with it.

`num_nulls(published_at) = 1` says the same and proves nothing about a partial index: the
ids are looked up by primary key (tests/integration/test_outbox_mark_plans.py). The jobs
functions follow the same rule (jobs/sql/jobs_claim_many.sql).
"""

import importlib

from django.db import migrations

MARK_PUBLISHED = """
CREATE OR REPLACE FUNCTION outbox_mark_published(p_ids bigint[], p_counter text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    marked int;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    -- GREATEST: a web host's clock ahead of the database's must not break the check.
    -- num_nulls(): "not published yet", without proving a partial index's predicate (above).
    UPDATE outbox_outboxentry
    SET published_at = GREATEST(now(), created_at), reserved_until = NULL, last_error = ''
    WHERE id = ANY(p_ids) AND num_nulls(published_at) = 1;
    GET DIAGNOSTICS marked = ROW_COUNT;
    IF marked > 0 THEN
        PERFORM outbox_counter_add(p_counter, marked);
    END IF;
    RETURN marked;
END;
$$;
"""

# Back to the mark of 0003 (frozen there).
MARK_PUBLISHED_0003 = importlib.import_module("outbox.migrations.0003_counter")


class Migration(migrations.Migration):
    dependencies = [("outbox", "0005_outboxentry_priority")]

    operations = [migrations.RunSQL(MARK_PUBLISHED, MARK_PUBLISHED_0003.MARK_PUBLISHED)]
