"""Periodic schedules: read-only rows (their definitions come from code), paused and resumed
by an operator's action through jobs.scheduler's services, each with a required note that
the audit trail (ScheduleEvent, inline) keeps with who and when."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.db.models import QuerySet
from django.http import HttpRequest

from jobs import scheduler
from jobs.admin.base import ReadOnlyAdmin, job_link_html
from jobs.exceptions import JobError
from jobs.models import Schedule, ScheduleEvent
from outbox.generics import TabularInline


class ScheduleActionForm(ActionForm):
    note = forms.CharField(
        required=False,
        max_length=500,
        label="Note",
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "why (required)"}),
    )


class ScheduleEventInline(TabularInline[ScheduleEvent, Schedule]):
    """The schedule's audit trail, newest first (a few rows a year: no cap needed)."""

    model = ScheduleEvent
    fk_name = "schedule"
    fields = ("at", "action", "actor", "note", "details")
    readonly_fields = fields
    ordering = ("-at", "-id")
    extra = 0
    max_num = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin[Schedule]):
    list_display = (
        "name",
        "kind",
        "when",
        "catch_up",
        "state",
        "last_tick",
        "next_tick_shown",
        "submitted_ticks",
        "missed_ticks",
    )
    fieldsets = (
        (None, {"fields": ("name", "state", "kind", "input", "source")}),
        ("When", {"fields": ("cron", "timezone", "catch_up", "catch_up_seconds")}),
        (
            "Ticks",
            {
                "fields": (
                    "decided_through",
                    "last_tick",
                    "last_job",
                    "next_tick",
                    "submitted_ticks",
                    "missed_ticks",
                    "seen_at",
                )
            },
        ),
        ("Pause", {"fields": ("paused", "paused_by", "paused_at", "pause_note")}),
    )
    list_filter = ("paused", "source", "catch_up")
    search_fields = ("name", "kind")
    ordering = ("name",)
    action_form = ScheduleActionForm
    actions = ("pause", "resume")
    readonly_fields = ("last_job", "state")
    inlines = (ScheduleEventInline,)

    @admin.display(description="when")
    def when(self, obj: Schedule) -> str:
        return f"{obj.cron} ({obj.timezone})"

    @admin.display(description="state")
    def state(self, obj: Schedule) -> str:
        if obj.paused:
            return f"paused by {obj.paused_by}: {obj.pause_note}"
        if not scheduler.schedule_defined_recently(obj):
            return "not defined (no running ticker knows it)"
        return "active"

    @admin.display(description="next tick", ordering="next_tick")
    def next_tick_shown(self, obj: Schedule) -> Any:
        return "paused" if obj.paused else obj.next_tick

    @admin.display(description="last job")
    def last_job(self, obj: Schedule) -> str:
        return job_link_html(obj.last_job_id) if obj.last_job_id else "-"

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("jobs.pause_schedule")

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[Schedule], service: Any, *, verb: str
    ) -> None:
        note = (request.POST.get("note") or "").strip()
        if not note:
            self.message_user(
                request, f"Write a note saying why before you {verb}.", messages.ERROR
            )
            return
        done = 0
        for row in queryset.only("pk"):
            try:
                service(schedule_id=row.pk, actor=request.user.get_username(), note=note)
            except JobError as exc:  # paused already, not paused, moved meanwhile
                self.message_user(request, str(exc), messages.WARNING)
            else:
                done += 1
        if done:
            self.message_user(
                request, f"{verb.capitalize()}d {done} schedule(s).", messages.SUCCESS
            )

    @admin.action(permissions=["pause"], description="Pause: submit no more ticks")
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._decide(request, queryset, scheduler.schedule_pause, verb="pause")

    @admin.action(
        permissions=["pause"], description="Resume: tick again (the paused ticks are skipped)"
    )
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._decide(request, queryset, scheduler.schedule_resume, verb="resume")
