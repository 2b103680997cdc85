"""Completion callbacks: one delivery per (job, terminal event), and every attempt to send it.

A delivery row is written by the database itself, in the transaction that ends the job (the
trigger jobs_job_callback, jobs/sql/jobs_callback_enqueue.sql), so no path that ends a job can
forget it. Its `webhook_id` is the stable idempotency key: derived only from the job and the
event, the same on every attempt (docs/architecture.md, "Completion callbacks").
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from jobs.models.job import Job


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # to be sent at next_attempt_at (or being sent until then)
    DELIVERED = "delivered"  # the receiver answered 2xx; never sent again
    FAILED = "failed"  # given up: a permanent answer, a refused destination, the budget spent


class CallbackDelivery(models.Model):
    """The notice of one job's end to its `callback_url`: the ledger row of that effect."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job, on_delete=models.PROTECT, related_name="callback_deliveries", db_index=False
    )
    event = models.CharField(max_length=20)  # the terminal state the job entered
    webhook_id = models.CharField(max_length=200, unique=True)
    status = models.CharField(
        max_length=20, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    # Due time of a pending delivery; a claimed one is pushed out by its lease, so a sender
    # that dies holding it leaves it due again when the lease lapses.
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.UUIDField(null=True, blank=True)  # the claim that may record it
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "callback deliveries"
        constraints = [
            models.CheckConstraint(
                name="jobs_callbackdelivery_status_valid",
                condition=Q(status__in=[s.value for s in DeliveryStatus]),
            ),
            models.CheckConstraint(
                name="jobs_callbackdelivery_pending_has_due_time",
                condition=(Q(status="pending") & Q(next_attempt_at__isnull=False))
                | (~Q(status="pending") & Q(finished_at__isnull=False)),
            ),
        ]
        indexes = [
            models.Index(fields=["job"], name="jobs_callbackdelivery_job_idx"),
            # The sender's only question: which pending deliveries are due?
            models.Index(
                fields=["next_attempt_at"],
                include=["id"],
                condition=Q(status="pending"),
                name="jobs_callbackdelivery_due_idx",
            ),
            models.Index(
                fields=["-finished_at"],
                condition=Q(status="failed"),
                name="jobs_callbackdelivery_fail_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} [{self.status}]"


class AttemptOutcome(models.TextChoices):
    SENDING = "sending"  # claimed and being sent; stays so if the sender died
    DELIVERED = "delivered"
    RETRY = "retry"
    FAILED = "failed"


class CallbackAttempt(models.Model):
    """One try to send a delivery: when, what the receiver answered (or why not), how long."""

    delivery = models.ForeignKey(
        CallbackDelivery, on_delete=models.CASCADE, related_name="attempt_log", db_index=False
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    outcome = models.CharField(
        max_length=20, choices=AttemptOutcome.choices, default=AttemptOutcome.SENDING
    )
    status_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True, default="")
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    sender = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "number"], name="jobs_callbackattempt_unique_number"
            )
        ]
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} [{self.outcome}]"
