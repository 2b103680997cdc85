"""Admin: read-only windows on jobs; state changes only through services (quarantine actions).

A job's page shows its event trail, its effect ledger and its quarantine records inline, each
capped at INLINE_ROWS (newest first) with the total and a link to all of them, so the page of
a job with ten thousand events stays fast. A quarantined job can be replayed with corrected
input from a form (`QuarantineRecordAdmin.replay_view`).
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.utils import display_for_value
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from outbox.generics import BaseInlineFormSet, ModelAdmin, TabularInline
from outbox.paginator import EstimatedCountPaginator

from . import quarantine, registry
from .exceptions import JobError
from .identity import lease_owner_worker
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
from .states import ACTIVE, JobState


class ReadOnlyAdmin[M: Model](ModelAdmin[M]):
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


INLINE_ROWS = 50


class CappedInlineFormSet[M: Model](BaseInlineFormSet[M, Job]):
    """The newest INLINE_ROWS rows of one job, with their total and a link to all of them."""

    changelist = ""  # admin URL name of the full list, searched by job id

    def get_queryset(self) -> Any:
        if not hasattr(self, "_queryset"):
            self._queryset = super().get_queryset()[:INLINE_ROWS]
        return self._queryset

    @cached_property
    def total(self) -> int:
        """All rows of this job (one indexed count)."""
        assert self.queryset is not None  # BaseInlineFormSet filters it by the job
        return int(self.queryset.count())

    @property
    def shown(self) -> int:
        return len(self.get_queryset())

    @property
    def all_url(self) -> str:
        return f"{reverse(self.changelist)}?q={self.instance.pk}"


class ReadOnlyInline[M: Model](TabularInline[M, Job]):
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    template = "jobs/admin/capped_tabular.html"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


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


def _job_link(job_id: Any) -> str:
    url = reverse("admin:jobs_job_change", args=[job_id])
    return format_html('<a href="{}">{}</a>', url, job_id)


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
        "created_at",
        "finished",
    )
    list_filter = ("state", KindFilter, "tenant", "created_at")
    list_select_related = ("tenant", "owner")
    search_fields = ("=id", "=business_key", "=idempotency_key")
    show_facets = admin.ShowFacets.NEVER  # facet counts are COUNT(*) per filter value
    # jobs_job_finished_idx: active jobs (NULL) first, then the most recently finished.
    ordering = ("-finished_at",)
    inlines = (QuarantineInline, EffectLedgerInline, JobEventInline)

    def get_ordering(self, request: HttpRequest) -> Any:
        """Active states: newest first on jobs_job_active_created_idx; else by finished_at."""
        if request.GET.get("state__exact") in {s.value for s in ACTIVE}:
            return ("-created_at",)
        return super().get_ordering(request)

    # Input and result are visible to staff here only; never in logs or metrics.
    readonly_fields = ["finished" if f.name == "finished_at" else f.name for f in Job._meta.fields]
    exclude = ("finished_at",)  # shown by `finished`, in its place

    @admin.display(description="finished at", ordering="finished_at")
    def finished(self, obj: Job) -> str:
        """When it finished, as the API says it: a quarantined job keeps `finished_at` empty
        (it may be redriven) and finished when it was quarantined, its row's last write
        (Job.finished_for_client)."""
        # Formatted here: the change page shows a method's value as text.
        return str(display_for_value(obj.finished_for_client, self.get_empty_value_display()))

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
        return _job_link(obj.job_id)


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
        return _job_link(obj.job_id)


class CorrectedInputForm(forms.Form):
    """Replay with corrected input: a note and the input as JSON, checked against the
    kind's input schema; an error is shown on the form and nothing changes."""

    note = forms.CharField(
        max_length=500,
        widget=forms.TextInput(attrs={"size": 80, "placeholder": "why (required)"}),
        help_text="Why the input changes; kept in the audit trail.",
        error_messages={"required": "Write a note saying why before you replay."},
    )
    input = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs={"rows": 18, "cols": 100, "spellcheck": "false"}),
        help_text="The corrected input: a JSON object matching the kind's input schema.",
    )

    def __init__(self, *args: Any, kind: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind

    def clean_input(self) -> dict[str, Any]:
        try:
            return quarantine.corrected_input_load(self.cleaned_data["input"], kind=self.kind)
        except JobError as exc:  # not JSON, not an object, schema mismatch, unknown kind
            raise forms.ValidationError(str(exc)) from None


class QuarantineActionForm(ActionForm):
    note = forms.CharField(
        required=False,
        max_length=500,
        label="Note",
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "why (required)"}),
    )


@admin.register(QuarantineRecord)
class QuarantineRecordAdmin(ReadOnlyAdmin[QuarantineRecord]):
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
    readonly_fields = ("replay_link",)

    @admin.display(description="job")
    def job_link(self, obj: QuarantineRecord) -> str:
        return _job_link(obj.job_id)

    @admin.display(description="corrected input")
    def replay_link(self, obj: QuarantineRecord) -> str:
        if obj.status != QuarantineStatus.OPEN:
            return "-"
        url = reverse("admin:jobs_quarantinerecord_replay", args=[obj.pk])
        return format_html('<a href="{}">replay with corrected input…</a>', url)

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = tuple(super().get_list_display(request))
        return (*shown, "replay_link") if self.has_redrive_permission(request) else shown

    def has_redrive_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("jobs.redrive_quarantinerecord")

    def get_urls(self) -> list[URLPattern]:
        replay = path(
            "<path:object_id>/replay/",
            self.admin_site.admin_view(self.replay_view),
            name="jobs_quarantinerecord_replay",
        )
        return [replay, *super().get_urls()]

    def replay_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Replay one quarantined job as a new input version with corrected input."""
        if not self.has_redrive_permission(request):
            raise PermissionDenied
        record = get_object_or_404(QuarantineRecord.objects.select_related("job"), pk=object_id)
        record_url = reverse("admin:jobs_quarantinerecord_change", args=[record.pk])
        if record.status != QuarantineStatus.OPEN:
            self.message_user(
                request,
                f"Quarantine record {record.pk} is already {record.status}.",
                messages.ERROR,
            )
            return HttpResponseRedirect(record_url)
        if request.method == "POST":
            form = CorrectedInputForm(request.POST, kind=record.kind)
            if form.is_valid():
                try:
                    done = quarantine.quarantine_replay(
                        record_id=record.pk,
                        actor=request.user.get_username(),
                        note=form.cleaned_data["note"].strip(),
                        corrected_input=form.cleaned_data["input"],
                    )
                except JobError as exc:  # resolved meanwhile, version clash, too large...
                    form.add_error(None, str(exc))
                else:
                    self.message_user(
                        request,
                        f"Replayed job {record.job_id} as job {done.replacement_id} "
                        f"(input version {record.job.input_version + 1}, corrected input).",
                        messages.SUCCESS,
                    )
                    return HttpResponseRedirect(
                        reverse("admin:jobs_job_change", args=[done.replacement_id])
                    )
        else:
            current = record.job.input if request.user.has_perm("jobs.view_job") else {}
            form = CorrectedInputForm(
                initial={"input": json.dumps(current, indent=2, sort_keys=True)}, kind=record.kind
            )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Replay job {record.job_id} with corrected input",
            "opts": self.model._meta,
            "record": record,
            "record_url": record_url,
            "job_url": reverse("admin:jobs_job_change", args=[record.job_id]),
            "next_version": record.job.input_version + 1,
            "form": form,
        }
        return TemplateResponse(request, "jobs/admin/quarantine_replay.html", context)

    def _decide(
        self,
        request: HttpRequest,
        queryset: QuerySet[QuarantineRecord],
        service: Any,
        *,
        verb: str,
        done_verb: str,
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
                request, f"{done_verb.capitalize()}: {done} quarantined job(s).", messages.SUCCESS
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
        self._decide(
            request, queryset, quarantine.quarantine_redrive, verb="redrive", done_verb="redriven"
        )

    @admin.action(permissions=["redrive"], description="Replay as a new input version (same input)")
    def replay_new_version(
        self, request: HttpRequest, queryset: QuerySet[QuarantineRecord]
    ) -> None:
        self._decide(
            request, queryset, quarantine.quarantine_replay, verb="replay", done_verb="replayed"
        )

    @admin.action(permissions=["redrive"], description="Discard: mark the job failed for good")
    def discard(self, request: HttpRequest, queryset: QuerySet[QuarantineRecord]) -> None:
        self._decide(
            request, queryset, quarantine.quarantine_discard, verb="discard", done_verb="discarded"
        )


@admin.register(Tenant)
class TenantAdmin(ModelAdmin[Tenant]):
    list_display = ("name", "created_at")
    search_fields = ("name",)
    filter_horizontal = ("members",)


@admin.register(StoredObject)
class StoredObjectAdmin(ReadOnlyAdmin[StoredObject]):
    list_display = ("id", "storage_name", "size", "content_type", "owner", "tenant", "created_at")
    list_select_related = ("owner", "tenant")
    ordering = ("-created_at",)


@admin.register(Signal)
class SignalAdmin(ReadOnlyAdmin[Signal]):
    list_display = ("name", "label", "value", "updated_at")
    ordering = ("name", "label")


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin[WorkerHeartbeat]):
    list_display = ("name", "hostname", "pid", "started_at", "seen_at")
    ordering = ("-seen_at",)
