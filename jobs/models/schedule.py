"""Periodic schedules: one row per schedule (its definition as last synced from code, its
cursor and the operator's pause), and the audit trail of what operators did to it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from jobs.ticks import NAME_MAX_LENGTH, CatchUp


class ScheduleSource(models.TextChoices):
    CODE = "code"  # @handler(schedule=...)
    SETTINGS = "settings"  # JOBS_SCHEDULES


class Schedule(models.Model):
    """A periodic schedule. The definition comes from code and is synced by the ticker;
    `decided_through` is its cursor: every tick up to it was submitted once or missed."""

    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    kind = models.CharField(max_length=100)
    cron = models.CharField(max_length=100)
    timezone = models.CharField(max_length=64, default="UTC")
    catch_up = models.CharField(
        max_length=20,
        choices=[(p.value, p.value) for p in CatchUp],
        default=CatchUp.SKIP_OLDER.value,
    )
    catch_up_seconds = models.PositiveIntegerField(default=600)
    input = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=20, choices=ScheduleSource.choices)

    # The cursor: ticks <= decided_through are decided. Moved only forward, by a write
    # guarded on its old value (jobs.scheduler).
    decided_through = models.DateTimeField()
    next_tick = models.DateTimeField(null=True, blank=True)  # NULL: the cron never ticks again
    last_tick = models.DateTimeField(null=True, blank=True)  # the newest tick submitted
    last_job_id = models.UUIDField(null=True, blank=True)
    submitted_ticks = models.PositiveBigIntegerField(default=0)
    missed_ticks = models.PositiveBigIntegerField(default=0)  # skipped by the catch-up policy

    paused = models.BooleanField(default=False)
    paused_by = models.CharField(max_length=200, blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    pause_note = models.TextField(blank=True, default="")

    # When a process whose code (or settings) defines this schedule last synced it: a
    # schedule removed from code is no longer ticked, and keeps its row and history.
    seen_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        permissions = [("pause_schedule", "Can pause or resume periodic schedules")]
        constraints = [
            models.CheckConstraint(
                name="jobs_schedule_catch_up_valid",
                condition=Q(catch_up__in=[p.value for p in CatchUp]),
            ),
            models.CheckConstraint(
                name="jobs_schedule_paused_has_time",
                condition=Q(paused=False) | Q(paused_at__isnull=False),
            ),
            models.CheckConstraint(
                name="jobs_schedule_last_tick_decided",
                condition=Q(last_tick__isnull=True) | Q(last_tick__lte=models.F("decided_through")),
            ),
            models.CheckConstraint(
                name="jobs_schedule_next_tick_after_cursor",
                condition=Q(next_tick__isnull=True) | Q(next_tick__gt=models.F("decided_through")),
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_tick"], condition=Q(paused=False), name="jobs_schedule_due_idx"
            )
        ]

    def __str__(self) -> str:
        return self.name


class ScheduleAction(models.TextChoices):
    CREATED = "created"
    CHANGED = "changed"  # its definition changed in code
    PAUSED = "paused"
    RESUMED = "resumed"


class ScheduleEvent(models.Model):
    """Append-only audit trail of one schedule: who did what, when, and why."""

    schedule = models.ForeignKey(
        Schedule, on_delete=models.PROTECT, related_name="events", db_index=False
    )
    action = models.CharField(max_length=20, choices=ScheduleAction.choices)
    actor = models.CharField(max_length=200, blank=True, default="")
    note = models.TextField(blank=True, default="")
    details = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["schedule", "at"], name="jobs_scheduleevent_at_idx")]
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor or 'the ticker'}"
