"""Two columns of jobs_job for issue 27: `priority` (Django's task range -100..100, higher runs
first, 0 by default, also as the database default for writers that do not name it) and
`progress` (what the handler last reported, jsonb, NULL until then).

Both are added without a table rewrite (a constant default). The range check is added
NOT VALID and validated by a second statement: the validation scans the table under a lock that
lets writes go on (SHARE UPDATE EXCLUSIVE), instead of under the ALTER's exclusive one.
"""

from django.db import migrations, models

CHECK = "jobs_job_priority_range"


class Migration(migrations.Migration):
    dependencies = [("jobs", "0019_one_claim")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="priority",
            field=models.SmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="progress",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    [
                        f"ALTER TABLE jobs_job ADD CONSTRAINT {CHECK} "
                        "CHECK (priority >= -100 AND priority <= 100) NOT VALID;",
                        f"ALTER TABLE jobs_job VALIDATE CONSTRAINT {CHECK};",
                    ],
                    f"ALTER TABLE jobs_job DROP CONSTRAINT IF EXISTS {CHECK};",
                )
            ],
            state_operations=[
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("priority__gte", -100), ("priority__lte", 100)),
                        name=CHECK,
                    ),
                )
            ],
        ),
    ]
