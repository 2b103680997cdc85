"""Periodic schedules (issue 27, part 2): one row per schedule (its definition as synced from
code, its cursor `decided_through`, counts and pause state) and its audit trail. Two new
tables, nothing else touched."""

import django.db.models.deletion
from django.db import migrations, models

CATCH_UP = [("skip_older", "skip_older"), ("latest", "latest"), ("all", "all")]


class Migration(migrations.Migration):
    dependencies = [("jobs", "0020_job_priority_progress")]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100, unique=True)),
                ("kind", models.CharField(max_length=100)),
                ("cron", models.CharField(max_length=100)),
                ("timezone", models.CharField(default="UTC", max_length=64)),
                ("catch_up", models.CharField(choices=CATCH_UP, default="skip_older", max_length=20)),
                ("catch_up_seconds", models.PositiveIntegerField(default=600)),
                ("input", models.JSONField(blank=True, default=dict)),
                ("source", models.CharField(choices=[("code", "Code"), ("settings", "Settings")], max_length=20)),
                ("decided_through", models.DateTimeField()),
                ("next_tick", models.DateTimeField(blank=True, null=True)),
                ("last_tick", models.DateTimeField(blank=True, null=True)),
                ("last_job_id", models.UUIDField(blank=True, null=True)),
                ("submitted_ticks", models.PositiveBigIntegerField(default=0)),
                ("missed_ticks", models.PositiveBigIntegerField(default=0)),
                ("paused", models.BooleanField(default=False)),
                ("paused_by", models.CharField(blank=True, default="", max_length=200)),
                ("paused_at", models.DateTimeField(blank=True, null=True)),
                ("pause_note", models.TextField(blank=True, default="")),
                ("seen_at", models.DateTimeField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "permissions": [("pause_schedule", "Can pause or resume periodic schedules")],
                "indexes": [
                    models.Index(condition=models.Q(("paused", False)), fields=["next_tick"], name="jobs_schedule_due_idx"),
                ],
                "constraints": [
                    models.CheckConstraint(condition=models.Q(("catch_up__in", ["skip_older", "latest", "all"])), name="jobs_schedule_catch_up_valid"),
                    models.CheckConstraint(condition=models.Q(("paused", False), ("paused_at__isnull", False), _connector="OR"), name="jobs_schedule_paused_has_time"),
                    models.CheckConstraint(condition=models.Q(("last_tick__isnull", True), ("last_tick__lte", models.F("decided_through")), _connector="OR"), name="jobs_schedule_last_tick_decided"),
                    models.CheckConstraint(condition=models.Q(("next_tick__isnull", True), ("next_tick__gt", models.F("decided_through")), _connector="OR"), name="jobs_schedule_next_tick_after_cursor"),
                ],
            },
        ),
        migrations.CreateModel(
            name="ScheduleEvent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("action", models.CharField(choices=[("created", "Created"), ("changed", "Changed"), ("paused", "Paused"), ("resumed", "Resumed")], max_length=20)),
                ("actor", models.CharField(blank=True, default="", max_length=200)),
                ("note", models.TextField(blank=True, default="")),
                ("details", models.JSONField(blank=True, default=dict)),
                ("at", models.DateTimeField(auto_now_add=True)),
                ("schedule", models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name="events", to="jobs.schedule")),
            ],
            options={
                "ordering": ["at", "id"],
                "indexes": [models.Index(fields=["schedule", "at"], name="jobs_scheduleevent_at_idx")],
            },
        ),
    ]
