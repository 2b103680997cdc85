"""A job's page (its event trail, effect ledger and quarantine records inline) and the
lists of events and ledger entries.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import display_for_value
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from jobs import registry
from jobs.admin.base import (
    CappedInlineFormSet,
    ReadOnlyAdmin,
    ReadOnlyInline,
    job_link_html,
)
from jobs.admin.callbacks import CallbackDeliveryInline
from jobs.identity import lease_owner_worker
from jobs.models import (
    EffectLedgerEntry,
    Job,
    JobEvent,
    QuarantineRecord,
)
from jobs.progress import progress_text
from jobs.states import ACTIVE, JobState
from outbox.generics import ModelAdmin

DEPENDENCIES_SHOWN = 50  # on a job's page; the rest are counted


class JobEventFormSet(CappedInlineFormSet[JobEvent]):
    changelist = "admin:jobs_jobevent_changelist"


class JobEventInline(ReadOnlyInline[JobEvent]):
    model = JobEvent
    formset = JobEventFormSet
    fields = ("at", "from_state", "to_state", "generation", "attempt", "worker", "actor", "reason")
    readonly_fields = fields
    ordering = ("-at", "-id")
    show_change_link = False


class EffectLedgerFormSet(CappedInlineFormSet[EffectLedgerEntry]):
    changelist = "admin:jobs_effectledgerentry_changelist"


class EffectLedgerInline(ReadOnlyInline[EffectLedgerEntry]):
    """Which external effects applied, with which key: a redrive will not repeat them."""

    model = EffectLedgerEntry
    formset = EffectLedgerFormSet
    verbose_name_plural = "effect ledger"
    fields = (
        "name",
        "input_version",
        "state",
        "local",
        "calls",
        "idempotency_key",
        "generation",
        "updated_at",
        "applied_at",
        "last_error",
    )
    readonly_fields = fields
    ordering = ("-id",)


class QuarantineFormSet(CappedInlineFormSet[QuarantineRecord]):
    changelist = "admin:jobs_quarantinerecord_changelist"


class QuarantineInline(ReadOnlyInline[QuarantineRecord]):
    model = QuarantineRecord
    fk_name = "job"
    formset = QuarantineFormSet
    fields = (
        "created_at",
        "status",
        "reason",
        "category",
        "attempts",
        "responsible",
        "resolved_by",
    )
    readonly_fields = fields
    ordering = ("-created_at",)


class ToStateFilter(admin.SimpleListFilter):
    """The states from jobs.states: no SELECT DISTINCT over every event."""

    title = "to state"
    parameter_name = "to_state"

    def lookups(
        self, request: HttpRequest, model_admin: ModelAdmin[JobEvent]
    ) -> list[tuple[str, str]]:
        return [(state.value, state.label) for state in JobState]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(to_state=self.value()) if self.value() else queryset


class KindFilter(admin.SimpleListFilter):
    """Kinds this process knows, from the registry: no SELECT DISTINCT over a million rows."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Job]) -> list[tuple[str, str]]:
        return [(kind, kind) for kind in sorted(registry.kinds())]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(kind=self.value()) if self.value() else queryset


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin[Job]):
    list_display = (
        "id",
        "kind",
        "kind_version",
        "state",
        "attempt",
        "generation",
        "tenant",
        "owner",
        "worker",
        "progress_shown",
        "created_at",
        "finished",
    )
    list_filter = ("state", KindFilter, "tenant", "created_at")
    list_select_related = ("tenant", "owner")
    search_fields = ("=id", "=business_key", "=idempotency_key")
    show_facets = admin.ShowFacets.NEVER  # facet counts are COUNT(*) per filter value
    # jobs_job_finished_idx: active jobs (NULL) first, then the most recently finished.
    ordering = ("-finished_at",)
    inlines = (QuarantineInline, EffectLedgerInline, CallbackDeliveryInline, JobEventInline)

    def get_ordering(self, request: HttpRequest) -> Any:
        """Active states: newest first on jobs_job_active_created_idx; else by finished_at."""
        if request.GET.get("state__exact") in {s.value for s in ACTIVE}:
            return ("-created_at",)
        return super().get_ordering(request)

    # Input and result are visible to staff here only; never in logs or metrics.
    readonly_fields = [
        *(
            {"finished_at": "finished", "progress": "progress_shown"}.get(f.name, f.name)
            for f in Job._meta.fields
        ),
        "children_shown",
        "dependencies_shown",
    ]
    exclude = ("finished_at",)  # shown by `finished`, in its place

    @admin.display(description="finished at", ordering="finished_at")
    def finished(self, obj: Job) -> str:
        """When it finished, as the API says it: a quarantined job keeps `finished_at` empty
        (it may be redriven) and finished when it was quarantined, its row's last write
        (Job.finished_for_client)."""
        # Formatted here: the change page shows a method's value as text.
        return str(display_for_value(obj.finished_for_client, self.get_empty_value_display()))

    @admin.display(description="progress")
    def progress_shown(self, obj: Job) -> str:
        """What the handler last reported (ctx.progress), and when."""
        text = progress_text(obj.progress)
        updated_at = obj.progress.get("updated_at") if isinstance(obj.progress, dict) else None
        return f"{text} (at {updated_at})" if updated_at and text != "-" else text

    @admin.display(description="follow-ups (children)")
    def children_shown(self, obj: Job) -> str:
        """How many jobs its handler submitted (ctx.submit), linked to their list."""
        count = Job.objects.filter(parent_id=obj.pk).count()
        if not count:
            return "-"
        url = reverse("admin:jobs_job_changelist") + f"?parent__exact={obj.pk}"
        return format_html('<a href="{}">{} job(s)</a>', url, count)

    @admin.display(description="after (dependencies)")
    def dependencies_shown(self, obj: Job) -> str:
        """The jobs it waits (or waited) for, with their states (jobs.links)."""
        rows = list(
            Job.objects.filter(waiter_links__waiter_id=obj.pk)
            .order_by("pk")
            .values_list("pk", "state")[:DEPENDENCIES_SHOWN]
        )
        if not rows:
            return "-"
        links = format_html_join(", ", "{} ({})", ((job_link_html(pk), st) for pk, st in rows))
        more = obj.dependency_links.count() - len(rows)
        return format_html("{}{}", links, f" and {more} more" if more > 0 else "")

    @admin.display(description="worker")
    def worker(self, obj: Job) -> str:
        """The lease owner's worker, as /ops/ and Flower name it, and its pool process."""
        if not obj.lease_owner:
            return "-"
        name, pid = lease_owner_worker(obj.lease_owner)
        return name if pid is None else f"{name} (pid {pid})"


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin[JobEvent]):
    list_display = (
        "at",
        "job_link",
        "from_state",
        "to_state",
        "generation",
        "attempt",
        "worker",
        "actor",
        "reason",
    )
    list_filter = (ToStateFilter,)
    search_fields = ("=job__id",)
    ordering = ("-id",)
    show_facets = admin.ShowFacets.NEVER

    @admin.display(description="job")
    def job_link(self, obj: JobEvent) -> str:
        return job_link_html(obj.job_id)


@admin.register(EffectLedgerEntry)
class EffectLedgerEntryAdmin(ReadOnlyAdmin[EffectLedgerEntry]):
    list_display = (
        "idempotency_key",
        "job_link",
        "name",
        "input_version",
        "state",
        "local",
        "calls",
        "generation",
        "updated_at",
        "applied_at",
    )
    list_filter = ("state", "local", "name")
    search_fields = ("=idempotency_key", "=job__id")
    ordering = ("-id",)

    @admin.display(description="job")
    def job_link(self, obj: EffectLedgerEntry) -> str:
        return job_link_html(obj.job_id)
