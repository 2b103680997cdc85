"""A job, its event trail, its tenant and the stored objects it may read."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from jobs.ids import uuid7
from jobs.states import ACTIVE, CLAIMABLE, TERMINAL, JobState, choices


def _in(states: frozenset[JobState] | set[JobState]) -> list[str]:
    return sorted(state.value for state in states)


class Tenant(models.Model):
    """A group of users who may see each other's jobs."""

    name = models.SlugField(max_length=100, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="tenants", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class StoredObject(models.Model):
    """An upload kept in Django storage; jobs name it instead of carrying its bytes."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.PROTECT)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    storage_name = models.CharField(max_length=300, unique=True)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    content_type = models.CharField(max_length=200, default="application/octet-stream")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"object {self.id}"


class Job(models.Model):
    """One accepted unit of deferred work; the database row is the truth about it."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    kind = models.CharField(max_length=100)
    kind_version = models.PositiveIntegerField(default=1)
    # Foreign keys carry no index of their own: (owner, -created_at) and (tenant, -created_at)
    # lead with them, and the two rarely-set ones have partial indexes (Meta). Every index is
    # written on each of a job's row versions (accept, claim, finish): fewer is faster.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    tenant = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
        db_index=False,
    )
    business_key = models.CharField(max_length=200, null=True, blank=True)
    input_version = models.PositiveIntegerField(default=1)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64)
    input = models.JSONField(default=dict, blank=True)
    input_ref = models.ForeignKey(
        StoredObject,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
        db_index=False,
    )
    serialization_key = models.CharField(max_length=200, null=True, blank=True)
    replay_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="replays",
        db_index=False,
    )

    # The job whose handler submitted this one (`ctx.submit`), committed with its success.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        db_index=False,
        editable=False,
    )
    # Fan-in (`after=`, jobs.links): how many of the jobs it waits for have not ended yet;
    # NULL for a job submitted without `after`. The database counts it down (the trigger
    # jobs_job_after_state) and releases the job, waiting -> queued, at 0.
    waiting_for = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # Some waiting job names this one in its `after`: only such a job's end runs the trigger.
    has_waiters = models.BooleanField(default=False, db_default=False, editable=False)

    state = models.CharField(max_length=20, choices=choices(), default=JobState.QUEUED.value)
    attempt = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=5)
    generation = models.PositiveBigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    result = models.JSONField(null=True, blank=True)
    error_category = models.CharField(max_length=50, blank=True, default="")
    error_message = models.TextField(blank=True, default="")

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The W3C trace context (traceparent, tracestate) of the job's root span when tracing is
    # on (jobs.tracing): every attempt's spans join that trace. NULL when it is off.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    # Django's task priority range and meaning (django.tasks): -100..100, higher runs first,
    # 0 by default. The database default serves writers that do not name it (submit_many).
    priority = models.SmallIntegerField(default=0, db_default=0)
    # What the handler last reported of its progress (ctx.progress, written under the fence):
    # {"done", "total", "message", "updated_at"}; NULL until it reports. Never the input.
    progress = models.JSONField(null=True, blank=True, editable=False)
    # Where the job's end is announced (jobs.callbacks): a signed POST once it succeeds, fails
    # or is cancelled. NULL for most jobs, whose end then costs nothing more (the trigger's
    # WHEN clause reads this column first).
    callback_url = models.CharField(max_length=2048, null=True, blank=True, editable=False)

    # Not a column: True on the job `job_submit` returns when a repeated key found it there.
    replayed: bool = False

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="jobs_job_state_valid", condition=Q(state__in=_in(set(JobState)))
            ),
            models.CheckConstraint(
                name="jobs_job_leased_has_lease",
                condition=~Q(state=JobState.LEASED.value)
                | Q(lease_owner__isnull=False, lease_until__isnull=False),
            ),
            models.CheckConstraint(
                name="jobs_job_claimable_has_due_time",
                condition=~Q(state__in=_in(CLAIMABLE)) | Q(next_attempt_at__isnull=False),
            ),
            models.CheckConstraint(
                name="jobs_job_finished_iff_terminal",
                condition=(Q(state__in=_in(TERMINAL)) & Q(finished_at__isnull=False))
                | (~Q(state__in=_in(TERMINAL)) & Q(finished_at__isnull=True)),
            ),
            models.CheckConstraint(
                name="jobs_job_succeeded_has_result",
                condition=~Q(state=JobState.SUCCEEDED.value) | Q(result__isnull=False),
            ),
            models.CheckConstraint(
                name="jobs_job_priority_range", condition=Q(priority__gte=-100, priority__lte=100)
            ),
            models.CheckConstraint(
                name="jobs_job_attempt_within_generation",
                condition=Q(attempt__lte=models.F("generation")),
            ),
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="jobs_job_unique_idempotency_key",
            ),
            # One logical job per (kind, business_key, input_version) within its scope: the
            # tenant, or the owner for personal jobs. Scoped, so keys never collide (or leak)
            # across tenants.
            models.UniqueConstraint(
                fields=["tenant", "kind", "business_key", "input_version"],
                condition=Q(business_key__isnull=False, tenant__isnull=False),
                name="jobs_job_unique_logical_job_tenant",
            ),
            models.UniqueConstraint(
                fields=["owner", "kind", "business_key", "input_version"],
                condition=Q(business_key__isnull=False, tenant__isnull=True),
                name="jobs_job_unique_logical_job_owner",
            ),
            # The database, not a lock in Python, keeps one leased job per serialization key.
            models.UniqueConstraint(
                fields=["serialization_key"],
                condition=Q(serialization_key__isnull=False, state=JobState.LEASED.value),
                name="jobs_job_one_leased_per_serialization_key",
            ),
        ]
        indexes = [
            # "Due work": index-only for id by due time, only the claimable rows.
            models.Index(
                fields=["next_attempt_at"],
                include=["id"],
                condition=Q(state__in=_in(CLAIMABLE)),
                name="jobs_job_due_idx",
            ),
            # "Expired leases": only leased rows, index-only for id by expiry.
            models.Index(
                fields=["lease_until"],
                include=["id", "generation"],
                condition=Q(state=JobState.LEASED.value),
                name="jobs_job_lease_expiry_idx",
            ),
            models.Index(
                fields=["created_at"],
                condition=Q(state__in=_in(ACTIVE)),
                name="jobs_job_active_created_idx",
            ),
            models.Index(
                fields=["serialization_key", "created_at"],
                condition=Q(serialization_key__isnull=False, state__in=_in(ACTIVE)),
                name="jobs_job_serial_active_idx",
            ),
            models.Index(fields=["state", "kind"], name="jobs_job_state_kind_idx"),
            # A job's listings, newest first by a backward scan. Ascending on purpose: a new
            # job's created_at is the largest of its owner's, and the B-tree fills a page before
            # it splits there; a descending key put every new entry at the front of the owner's
            # range, each split left a half-full page behind (1.55x bytes a row in the soak).
            # Untenanted jobs, most of them, have no tenant entry at all.
            models.Index(
                fields=["tenant", "created_at"],
                condition=Q(tenant__isnull=False),
                name="jobs_job_tenant_at_idx",
            ),
            models.Index(fields=["owner", "created_at"], name="jobs_job_owner_at_idx"),
            models.Index(
                fields=["finished_at"],
                condition=Q(finished_at__isnull=False),
                name="jobs_job_finished_idx",
            ),
            models.Index(
                fields=["input_ref"],
                condition=Q(input_ref__isnull=False),
                name="jobs_job_input_ref_idx",
            ),
            models.Index(
                fields=["replay_of"],
                condition=Q(replay_of__isnull=False),
                name="jobs_job_replay_of_idx",
            ),
            models.Index(
                fields=["parent", "created_at"],
                condition=Q(parent__isnull=False),
                name="jobs_job_parent_idx",
            ),
            # Accepted per minute on /ops/ and reconciliation windows read by creation time.
            models.Index(fields=["created_at"], name="jobs_job_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} [{self.state}]"

    @property
    def job_state(self) -> JobState:
        return JobState(self.state)

    @property
    def is_finished(self) -> bool:
        return self.job_state in TERMINAL or self.job_state == JobState.QUARANTINED

    @property
    def finished_for_client(self) -> datetime | None:
        """When the job finished, as the API and the admin say it: a quarantined row keeps
        `finished_at` empty (an operator may still redrive it) and is not written again until
        an operator decides, so it finished at its last write."""
        if self.finished_at is None and self.job_state is JobState.QUARANTINED:
            return self.updated_at
        return self.finished_at


class JobEvent(models.Model):
    """Append-only trail of every transition: the traceable record of an accepted job."""

    # No index of its own: (job, at) leads with it.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events", db_index=False)
    from_state = models.CharField(max_length=20, blank=True, default="")
    to_state = models.CharField(max_length=20)
    generation = models.PositiveBigIntegerField()
    attempt = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True, default="")
    actor = models.CharField(max_length=200, blank=True, default="")
    reason = models.CharField(max_length=500, blank=True, default="")
    details = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["job", "at"], name="jobs_jobevent_job_at_idx")]
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.from_state or '-'} -> {self.to_state} (gen {self.generation})"
