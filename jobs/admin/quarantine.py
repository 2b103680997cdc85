"""Quarantine records: the operator's actions (redrive, replay, discard) through
jobs.quarantine's services, and replay with corrected input from a form
(`QuarantineRecordAdmin.replay_view`).
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from jobs import quarantine
from jobs.admin.base import (
    ReadOnlyAdmin,
    job_link_html,
)
from jobs.exceptions import JobError
from jobs.models import (
    QuarantineRecord,
    QuarantineStatus,
)


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
        return job_link_html(obj.job_id)

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
