"""Routes for operators; included at the site root by jobsite.urls."""

from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("ops/", views.ops_index, name="ops-index"),
    path("metrics", views.metrics, name="metrics"),
]
