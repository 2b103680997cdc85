"""Admin: the outbox, read-only, with lag and publish errors in view."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from .generics import ModelAdmin
from .models import OutboxEntry
from .paginator import EstimatedCountPaginator
from .transport import celery_app


class PublishedFilter(admin.SimpleListFilter):
    title = "published"
    parameter_name = "published"

    def lookups(
        self, request: HttpRequest, model_admin: ModelAdmin[OutboxEntry]
    ) -> list[tuple[str, str]]:
        return [("no", "not yet"), ("yes", "published"), ("failing", "last publish failed")]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[OutboxEntry]
    ) -> QuerySet[OutboxEntry]:
        if self.value() == "no":
            return queryset.filter(published_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(published_at__isnull=False)
        if self.value() == "failing":
            return queryset.filter(published_at__isnull=True).exclude(last_error="")
        return queryset


class TaskNameFilter(admin.SimpleListFilter):
    """Task names from the routing table: no SELECT DISTINCT over the whole outbox."""

    title = "task"
    parameter_name = "task_name"

    def lookups(
        self, request: HttpRequest, model_admin: ModelAdmin[OutboxEntry]
    ) -> list[tuple[str, str]]:
        names = sorted(n for n in celery_app().tasks if not n.startswith("celery."))
        return [(name, name) for name in names]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[OutboxEntry]
    ) -> QuerySet[OutboxEntry]:
        return queryset.filter(task_name=self.value()) if self.value() else queryset


@admin.register(OutboxEntry)
class OutboxEntryAdmin(ModelAdmin[OutboxEntry]):
    list_display = (
        "id",
        "task_name",
        "queue",
        "job_id",
        "priority",
        "available_at",
        "published_at",
        "lag",
        "publish_attempts",
        "last_error",
    )
    list_filter = (PublishedFilter, TaskNameFilter)
    search_fields = ("=job_id",)
    ordering = ("-id",)
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts are COUNT(*) per filter value
    paginator = EstimatedCountPaginator
    list_per_page = 50

    @admin.display(description="lag (s)")
    def lag(self, obj: OutboxEntry) -> str:
        """Time from due to published, or how late an unpublished due row is now."""
        end = obj.published_at or timezone.now()
        seconds = (end - obj.available_at).total_seconds()
        return f"{max(seconds, 0):.1f}" if end >= obj.available_at else "not due"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: OutboxEntry | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: OutboxEntry | None = None) -> bool:
        return False
