"""Reserved for completion callbacks (issue 27, part 5); filled in by that work."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0022_job_links")]

    operations: list[migrations.operations.base.Operation] = []
