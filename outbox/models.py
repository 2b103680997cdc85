"""The transactional outbox: an intent to publish, committed with the business row."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q


class OutboxEntry(models.Model):
    """One message to publish: a task name, a queue and a small JSON body (never a payload)."""

    id = models.BigAutoField(primary_key=True)
    task_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    job_id = models.UUIDField(null=True, blank=True, db_index=True)
    kwargs = models.JSONField(default=dict, blank=True)
    # Higher is published first when the relay has a backlog of due rows (outbox.relay);
    # the writer's number, e.g. a job's priority (-100..100). Also in the database: a row
    # some writer inserts without it is a 0.
    priority = models.SmallIntegerField(default=0, db_default=0)
    available_at = models.DateTimeField()
    reserved_until = models.DateTimeField(null=True, blank=True)
    # The relay reservation that holds the row (none for the fast path's own reservation): a
    # relay that lost the answer of its reservation takes its rows back (outbox.relay).
    reserved_by = models.UUIDField(null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    publish_attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "outbox entries"
        indexes = [
            # The relay's only question: which unpublished rows are due?
            models.Index(
                fields=["available_at"],
                include=["id"],
                condition=Q(published_at__isnull=True),
                name="outbox_entry_due_idx",
            ),
            # Under a backlog: the due rows of the highest priority first, oldest first.
            models.Index(
                F("priority").desc(),
                "available_at",
                "id",
                condition=Q(published_at__isnull=True),
                name="outbox_entry_priority_due_idx",
            ),
            models.Index(
                fields=["published_at"],
                condition=Q(published_at__isnull=False),
                name="outbox_entry_published_idx",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                name="outbox_entry_published_after_created",
                condition=Q(published_at__isnull=True)
                | Q(published_at__gte=models.F("created_at")),
            )
        ]

    def __str__(self) -> str:
        return f"{self.task_name}({self.job_id}) #{self.id}"


class Counter(models.Model):
    """A cross-process counter of the outbox's own events (`relay_published_total`), added to
    by the database function that counts them (`outbox_counter_add`), read at scrape time."""

    name = models.CharField(max_length=100, primary_key=True)
    value = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"
