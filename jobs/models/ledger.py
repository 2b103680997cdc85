"""What a job did and what stopped it: the effect ledger and quarantine records."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from jobs.models.job import Job


class EffectState(models.TextChoices):
    PENDING = "pending"  # recorded before the external call; outcome not known yet
    APPLIED = "applied"  # the call succeeded; never called again
    UNCERTAIN = "uncertain"  # the call may have happened (timeout): retry with the same key
    FAILED = "failed"  # the call definitely failed: retry with the same key


class EffectLedgerEntry(models.Model):
    """One business effect per (job, input version, name), with its provider idempotency key."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="effects")
    input_version = models.PositiveIntegerField()
    name = models.CharField(max_length=100)
    idempotency_key = models.CharField(max_length=200, unique=True)
    local = models.BooleanField(default=False)
    state = models.CharField(max_length=20, choices=EffectState.choices)
    generation = models.PositiveBigIntegerField()
    calls = models.PositiveIntegerField(default=0)
    outcome = models.JSONField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "effect ledger entries"
        constraints = [
            models.UniqueConstraint(
                fields=["job", "input_version", "name"], name="jobs_effect_unique_key"
            ),
            models.CheckConstraint(
                name="jobs_effect_applied_has_time",
                condition=~Q(state="applied") | Q(applied_at__isnull=False),
            ),
        ]
        indexes = [
            models.Index(
                fields=["updated_at"],
                condition=Q(state__in=["pending", "uncertain"]),
                name="jobs_effect_open_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} [{self.state}]"


class QuarantineStatus(models.TextChoices):
    OPEN = "open"  # waiting for an operator decision
    REDRIVEN = "redriven"  # retried with the same input version
    CORRECTED = "corrected"  # replayed as a new input version
    DISCARDED = "discarded"  # marked failed for good


class QuarantineRecord(models.Model):
    """Why a job stopped and who must decide; never the raw payload."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="quarantines")
    kind = models.CharField(max_length=100)
    reason = models.CharField(max_length=500)
    category = models.CharField(max_length=50)
    input_version = models.PositiveIntegerField()
    attempts = models.PositiveIntegerField()
    generation = models.PositiveBigIntegerField()
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    responsible = models.CharField(max_length=200)
    status = models.CharField(
        max_length=20, choices=QuarantineStatus.choices, default=QuarantineStatus.OPEN
    )
    resolution_note = models.TextField(blank=True, default="")
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    replacement = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        permissions = [("redrive_quarantinerecord", "Can redrive or discard quarantined jobs")]
        constraints = [
            models.UniqueConstraint(
                fields=["job"],
                condition=Q(status="open"),
                name="jobs_quarantine_one_open_per_job",
            ),
            models.CheckConstraint(
                name="jobs_quarantine_resolved_has_time",
                condition=Q(status="open") | Q(resolved_at__isnull=False),
            ),
        ]
        indexes = [models.Index(fields=["status", "-created_at"], name="jobs_quar_status_idx")]

    def __str__(self) -> str:
        return f"quarantine {self.job_id}: {self.reason}"
