"""Completion callbacks (issue 27, part 5): `Job.callback_url`, the delivery of a job's end
(`CallbackDelivery`, the ledger row of that notice, keyed by its stable webhook id) with every
attempt to send it (`CallbackAttempt`), and the trigger that queues the delivery in the very
transaction that ends the job (jobs/sql/jobs_callback_enqueue.sql), whatever path ends it.

The new column is nullable with no default: added without a table rewrite. The trigger is
AFTER UPDATE OF state with a WHEN clause that tests `callback_url IS NOT NULL` first: an
UPDATE of a job without a callback costs that test, no function call.
"""

import django.db.models.deletion
from django.db import migrations, models

from jobs.sql import sql_file

REVERSE = """
DROP TRIGGER IF EXISTS jobs_job_callback ON jobs_job;
DROP FUNCTION IF EXISTS jobs_callback_enqueue();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0022_job_links'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='callback_url',
            field=models.CharField(blank=True, editable=False, max_length=2048, null=True),
        ),
        migrations.CreateModel(
            name='CallbackDelivery',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('event', models.CharField(max_length=20)),
                ('webhook_id', models.CharField(max_length=200, unique=True)),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('failed', 'Failed')], default='pending', max_length=20)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('next_attempt_at', models.DateTimeField(blank=True, null=True)),
                ('claimed_by', models.UUIDField(blank=True, null=True)),
                ('last_status_code', models.PositiveIntegerField(blank=True, null=True)),
                ('last_error', models.CharField(blank=True, default='', max_length=500)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='callback_deliveries', to='jobs.job')),
            ],
            options={
                'verbose_name_plural': 'callback deliveries',
            },
        ),
        migrations.CreateModel(
            name='CallbackAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField()),
                ('started_at', models.DateTimeField()),
                ('outcome', models.CharField(choices=[('sending', 'Sending'), ('delivered', 'Delivered'), ('retry', 'Retry'), ('failed', 'Failed')], default='sending', max_length=20)),
                ('status_code', models.PositiveIntegerField(blank=True, null=True)),
                ('error', models.CharField(blank=True, default='', max_length=500)),
                ('duration_ms', models.PositiveIntegerField(blank=True, null=True)),
                ('sender', models.CharField(blank=True, default='', max_length=200)),
                ('delivery', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempt_log', to='jobs.callbackdelivery')),
            ],
            options={
                'ordering': ['delivery', 'number'],
            },
        ),
        migrations.AddIndex(
            model_name='callbackdelivery',
            index=models.Index(fields=['job'], name='jobs_callbackdelivery_job_idx'),
        ),
        migrations.AddIndex(
            model_name='callbackdelivery',
            index=models.Index(condition=models.Q(('status', 'pending')), fields=['next_attempt_at'], include=('id',), name='jobs_callbackdelivery_due_idx'),
        ),
        migrations.AddIndex(
            model_name='callbackdelivery',
            index=models.Index(condition=models.Q(('status', 'failed')), fields=['-finished_at'], name='jobs_callbackdelivery_fail_idx'),
        ),
        migrations.AddConstraint(
            model_name='callbackdelivery',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['pending', 'delivered', 'failed'])), name='jobs_callbackdelivery_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='callbackdelivery',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('status', 'pending'), ('next_attempt_at__isnull', False)), models.Q(models.Q(('status', 'pending'), _negated=True), ('finished_at__isnull', False)), _connector='OR'), name='jobs_callbackdelivery_pending_has_due_time'),
        ),
        migrations.AddConstraint(
            model_name='callbackattempt',
            constraint=models.UniqueConstraint(fields=('delivery', 'number'), name='jobs_callbackattempt_unique_number'),
        ),
        migrations.RunSQL(sql_file("jobs_callback_enqueue"), REVERSE),
    ]
