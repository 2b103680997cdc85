"""Job.trace_context: the W3C trace context of a job's root span (jobs.tracing); NULL when off.

A nullable column without a default: PostgreSQL adds it without rewriting the table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0016_relay_published_to_outbox")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
