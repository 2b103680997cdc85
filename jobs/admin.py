"""Admin: read-only windows on jobs; state changes only through services (quarantine actions)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from . import quarantine, registry
from .exceptions import JobError
from .models import (
    EffectLedgerEntry,
    Job,
    JobEvent,
    QuarantineRecord,
    QuarantineStatus,
    Signal,
    StoredObject,
    Tenant,
    WorkerHeartbeat,
)
from .ops.paginator import EstimatedCountPaginator
from .states import ACTIVE, JobState


class ReadOnlyAdmin(admin.ModelAdmin):
    """Every field read-only, no add, no delete: rows change only through services."""

    show_full_result_count = False
    paginator = EstimatedCountPaginator
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ("at", "from_state", "to_state", "generation", "attempt", "worker", "actor", "reason")
    readonly_fields = fields
    ordering = ("at", "id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ToStateFilter(admin.SimpleListFilter):
    """The states from jobs.states: no SELECT DISTINCT over every event."""

    title = "to state"
    parameter_name = "to_state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(state.value, state.label) for state in JobState]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(to_state=self.value()) if self.value() else queryset


class KindFilter(admin.SimpleListFilter):
    """Kinds this process knows, from the registry: no SELECT DISTINCT over a million rows."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [(kind, kind) for kind in sorted(registry.kinds())]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(kind=self.value()) if self.value() else queryset


def _job_link(job_id: Any) -> str:
    url = reverse("admin:jobs_job_change", args=[job_id])
    return format_html('<a href="{}">{}</a>', url, job_id)


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "kind",
        "kind_version",
        "state",
        "attempt",
        "generation",
        "tenant",
        "owner",
        "created_at",
        "finished_at",
    )
    list_filter = ("state", KindFilter, "tenant", "created_at")
    list_select_related = ("tenant", "owner")
    search_fields = ("=id", "=business_key", "=idempotency_key")
    show_facets = admin.ShowFacets.NEVER  # facet counts are COUNT(*) per filter value
    # jobs_job_finished_idx: active jobs (NULL) first, then the most recently finished.
    ordering = ("-finished_at",)
    inlines = (JobEventInline,)

    def get_ordering(self, request: HttpRequest) -> Any:
        """Active states: newest first on jobs_job_active_created_idx; else by finished_at."""
        if request.GET.get("state__exact") in {s.value for s in ACTIVE}:
            return ("-created_at",)
        return super().get_ordering(request)

    # Input and result are visible to staff here only; never in logs or metrics.
    readonly_fields = [f.name for f in Job._meta.fields]


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
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
        return _job_link(obj.job_id)


@admin.register(EffectLedgerEntry)
class EffectLedgerEntryAdmin(ReadOnlyAdmin):
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
        return _job_link(obj.job_id)


class QuarantineActionForm(ActionForm):
    note = forms.CharField(
        required=False,
        max_length=500,
        label="Note",
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "why (required)"}),
    )


@admin.register(QuarantineRecord)
class QuarantineRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "job_link",
        "kind",
        "status",
        "reason",
        "category",
        "input_version",
        "attempts",
        "last_attempt_at",
        "responsible",
        "created_at",
        "resolved_by",
    )
    list_filter = ("status", "kind", "category", "responsible")
    search_fields = ("=job__id", "kind")
    ordering = ("-created_at",)
    action_form = QuarantineActionForm
    actions = ("redrive_same_version", "replay_new_version", "discard")

    @admin.display(description="job")
    def job_link(self, obj: QuarantineRecord) -> str:
        return _job_link(obj.job_id)

    def has_redrive_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("jobs.redrive_quarantinerecord")

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[QuarantineRecord], service: Any, verb: str
    ) -> None:
        note = (request.POST.get("note") or "").strip()
        if not note:
            self.message_user(
                request, f"Write a note saying why before you {verb}.", messages.ERROR
            )
            return
        skipped = queryset.exclude(status=QuarantineStatus.OPEN).count()
        done, refused = 0, []
        for record in queryset.filter(status=QuarantineStatus.OPEN).only("pk"):
            try:
                service(record_id=record.pk, actor=request.user.get_username(), note=note)
            except JobError as exc:  # already resolved, unknown kind, version clash...
                refused.append(str(exc))
            else:
                done += 1
        if done:
            self.message_user(
                request, f"{verb.capitalize()}: {done} quarantined job(s).", messages.SUCCESS
            )
        if skipped:
            self.message_user(
                request, f"{skipped} record(s) were already resolved; left alone.", messages.WARNING
            )
        for reason in refused:
            self.message_user(request, reason, messages.ERROR)

    @admin.action(permissions=["redrive"], description="Redrive: retry the same input version")
    def redrive_same_version(
        self, request: HttpRequest, queryset: QuerySet[QuarantineRecord]
    ) -> None:
        self._decide(request, queryset, quarantine.quarantine_redrive, "redriven")

    @admin.action(permissions=["redrive"], description="Replay as a new input version")
    def replay_new_version(
        self, request: HttpRequest, queryset: QuerySet[QuarantineRecord]
    ) -> None:
        self._decide(request, queryset, quarantine.quarantine_replay, "replayed")

    @admin.action(permissions=["redrive"], description="Discard: mark the job failed for good")
    def discard(self, request: HttpRequest, queryset: QuerySet[QuarantineRecord]) -> None:
        self._decide(request, queryset, quarantine.quarantine_discard, "discarded")


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    search_fields = ("name",)
    filter_horizontal = ("members",)


@admin.register(StoredObject)
class StoredObjectAdmin(ReadOnlyAdmin):
    list_display = ("id", "storage_name", "size", "content_type", "owner", "tenant", "created_at")
    list_select_related = ("owner", "tenant")
    ordering = ("-created_at",)


@admin.register(Signal)
class SignalAdmin(ReadOnlyAdmin):
    list_display = ("name", "label", "value", "updated_at")
    ordering = ("name", "label")


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    list_display = ("name", "hostname", "pid", "started_at", "seen_at")
    ordering = ("-seen_at",)
