"""`OutboxEntry.priority` (higher is published first under a backlog; 0 for every existing row,
also as the column's database default) and the relay's index of due rows by priority.

The column comes with a constant default: PostgreSQL adds it without rewriting the table. The
index is built CONCURRENTLY (this migration is not atomic), so writers are not blocked while
a large outbox is indexed.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outbox", "0004_reservation_token"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboxentry",
            name="priority",
            field=models.SmallIntegerField(db_default=0, default=0),
        ),
        AddIndexConcurrently(
            model_name="outboxentry",
            index=models.Index(
                models.OrderBy(models.F("priority"), descending=True),
                "available_at",
                "id",
                condition=models.Q(("published_at__isnull", True)),
                name="outbox_entry_priority_due_idx",
            ),
        ),
    ]
