"""jobs_complete_many_hand_over: a group commit's keyed successes complete and hand their keys
over in one statement (jobs/sql/jobs_complete_many_hand_over.sql), instead of a savepoint and
a round trip each. A new function: workers of the previous release keep calling the ones
they know during a rolling deploy.
"""

from django.db import migrations

from jobs.sql import sql_file

REVERSE = """
DROP FUNCTION IF EXISTS jobs_complete_many_hand_over(
    uuid[], bigint[], text, int[], jsonb[], text[]
);
"""


class Migration(migrations.Migration):
    dependencies = [("jobs", "0012_batch_functions")]

    operations = [migrations.RunSQL(sql_file("jobs_complete_many_hand_over"), REVERSE)]
