"""The admin's read-only shapes: a model admin that changes nothing, inlines capped at
INLINE_ROWS (newest first, with the total and a link to all of them), a job's link.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from jobs.models import (
    Job,
)
from outbox.generics import BaseInlineFormSet, ModelAdmin, TabularInline
from outbox.paginator import EstimatedCountPaginator


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


def job_link_html(job_id: Any) -> str:
    url = reverse("admin:jobs_job_change", args=[job_id])
    return format_html('<a href="{}">{}</a>', url, job_id)
