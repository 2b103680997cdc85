"""Reserved for follow-up jobs and fan-in (issue 27, part 4); filled in by that work."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0021_schedules")]

    operations: list[migrations.operations.base.Operation] = []
