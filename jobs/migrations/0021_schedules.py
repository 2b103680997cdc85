"""Reserved for periodic schedules (issue 27, part 2); filled in by that work."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0020_job_priority_progress")]

    operations: list[migrations.operations.base.Operation] = []
