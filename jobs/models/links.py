"""Fan-in: which jobs a waiting job waits for (`after=`), one row per (waiter, dependency)."""

from __future__ import annotations

from django.db import models

from jobs.models.job import Job


class JobDependency(models.Model):
    """`waiter` runs once `dependency` (and every other of its rows) ended: succeeded,
    failed or cancelled. Written with the waiter; read by the trigger that releases it
    (jobs/sql/jobs_job_after_state.sql) and by `ctx.dependencies()`."""

    # No index of its own: the unique (waiter, dependency) leads with it.
    waiter = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="dependency_links", db_index=False
    )
    dependency = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="waiter_links")
    # What an end other than success does to the waiter: False (after_failure="run") counts
    # it as ended like a success; True (after_failure="cancel") cancels the waiter at once.
    cancel_on_failure = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["waiter", "dependency"], name="jobs_jobdependency_unique_edge"
            ),
            models.CheckConstraint(
                name="jobs_jobdependency_not_self",
                condition=~models.Q(waiter=models.F("dependency")),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.waiter_id} after {self.dependency_id}"
