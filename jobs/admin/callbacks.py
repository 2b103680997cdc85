"""Completion callbacks in the admin: a job's delivery inline, the list of deliveries (pending
and failed first to look at), each with its attempts. Read-only: the sender writes them."""

from __future__ import annotations

from django.contrib import admin

from jobs.admin.base import CappedInlineFormSet, ReadOnlyAdmin, ReadOnlyInline, job_link_html
from jobs.models import CallbackAttempt, CallbackDelivery
from outbox.generics import TabularInline


class CallbackDeliveryFormSet(CappedInlineFormSet[CallbackDelivery]):
    changelist = "admin:jobs_callbackdelivery_changelist"


class CallbackDeliveryInline(ReadOnlyInline[CallbackDelivery]):
    """The notice of the job's end to its callback_url: its status and its tries."""

    model = CallbackDelivery
    formset = CallbackDeliveryFormSet
    verbose_name_plural = "callback delivery"
    fields = (
        "webhook_id",
        "event",
        "status",
        "attempts",
        "next_attempt_at",
        "last_status_code",
        "last_error",
        "finished_at",
    )
    readonly_fields = fields
    ordering = ("-id",)


class CallbackAttemptInline(TabularInline[CallbackAttempt, CallbackDelivery]):
    model = CallbackAttempt
    extra = 0
    max_num = 0
    can_delete = False
    fields = ("number", "started_at", "outcome", "status_code", "error", "duration_ms", "sender")
    readonly_fields = fields
    ordering = ("number",)

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(CallbackDelivery)
class CallbackDeliveryAdmin(ReadOnlyAdmin[CallbackDelivery]):
    list_display = (
        "webhook_id",
        "job_link",
        "event",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "finished_at",
        "last_error",
    )
    list_filter = ("status", "event")
    search_fields = ("=webhook_id", "=job__id")
    ordering = ("-id",)
    show_facets = admin.ShowFacets.NEVER
    inlines = (CallbackAttemptInline,)

    @admin.display(description="job")
    def job_link(self, obj: CallbackDelivery) -> str:
        return job_link_html(obj.job_id)
