"""URL wiring only."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from jobs.health import healthz, readyz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("jobs.api.urls")),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("", include("jobs.ops.urls")),
]
