"""The operators' tables: counters, worker sightings, drain samples."""

from __future__ import annotations

from django.db import models


class Counter(models.Model):
    """Cross-process counters of rare events (stale writes, duplicate deliveries...)."""

    name = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True, default="")
    value = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "label"], name="jobs_counter_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.label}}}={self.value}"


class WorkerHeartbeat(models.Model):
    """Workers seen recently (for the ops page): one row per worker name."""

    name = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=200)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return self.name


class DrainSample(models.Model):
    """One redelivery check's estimate of how long the due backlog needs (jobs.redeliver).

    A message's delivery deadline is set by the largest estimate since it was published, so
    the few hundred newest samples are kept and older ones pruned by the check itself."""

    id = models.BigAutoField(primary_key=True)
    taken_at = models.DateTimeField()
    backlog = models.PositiveIntegerField()
    drain_rate = models.FloatField()  # completions per second over the last minute
    wait_seconds = models.FloatField()  # +inf: nothing drains while workers are busy
    # Where this run's window of due jobs ended: the next run goes on from there.
    scan_after_due = models.DateTimeField(null=True, blank=True)
    scan_after_id = models.UUIDField(null=True, blank=True)

    def __str__(self) -> str:
        return f"drain sample {self.taken_at:%H:%M:%S} wait={self.wait_seconds:.1f}s"
