"""API routes (mounted under /api/ by jobsite.urls)."""

from __future__ import annotations

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import views

app_name = "jobs-api"

urlpatterns = [
    path("jobs/", views.JobListCreateView.as_view(), name="job-list"),
    # str, not uuid: a malformed id must get our JSON 404, not Django's HTML one.
    path("jobs/<str:job_id>/", views.JobDetailView.as_view(), name="job-detail"),
    path("jobs/<str:job_id>/result/", views.JobResultView.as_view(), name="job-result"),
    path("jobs/<str:job_id>/cancel/", views.JobCancelView.as_view(), name="job-cancel"),
    path("objects/", views.ObjectUploadView.as_view(), name="object-list"),
    path("objects/<str:object_id>/", views.ObjectDetailView.as_view(), name="object-detail"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="jobs-api:schema"), name="docs"),
    re_path(r"^.*$", views.ApiNotFoundView.as_view(), name="not-found"),
]
