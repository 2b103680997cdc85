"""The other tables, read-only: tenants, stored objects, counters, worker sightings."""

from __future__ import annotations

from django.contrib import admin

from jobs.admin.base import (
    ReadOnlyAdmin,
)
from jobs.models import (
    Counter,
    StoredObject,
    Tenant,
    WorkerHeartbeat,
)
from outbox.generics import ModelAdmin


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


@admin.register(Counter)
class CounterAdmin(ReadOnlyAdmin[Counter]):
    list_display = ("name", "label", "value", "updated_at")
    ordering = ("name", "label")


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin[WorkerHeartbeat]):
    list_display = ("name", "hostname", "pid", "started_at", "seen_at")
    ordering = ("-seen_at",)
