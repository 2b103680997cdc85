"""API routes: `path("api/", include("jobs.api.urls"))` in any project (jobsite mounts them
under /api/). The schema covers these views only; Swagger UI (`docs/`) and ReDoc (`redoc/`)
are served where drf_spectacular is an installed app (it brings the pages' templates). Their
scripts come from SPECTACULAR_SETTINGS' *_DIST (a CDN by default; "SIDECAR" with
drf-spectacular-sidecar installed serves them from your static files)."""

from __future__ import annotations

from django.apps import apps
from django.urls import URLPattern, URLResolver, path, re_path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from . import long_poll, object_views, views
from .base import LibraryApiSchemaGenerator

app_name = "jobs-api"

urlpatterns: list[URLPattern | URLResolver] = [
    path("jobs/", views.JobListCreateView.as_view(), name="job-list"),
    # str, not uuid: a malformed id must get our JSON 404, not Django's HTML one.
    # Async: a `?wait=` long-poll sleeps without holding a thread (jobs/api/long_poll.py).
    path("jobs/<str:job_id>/", long_poll.job_detail, name="job-detail"),
    path("jobs/<str:job_id>/result/", views.JobResultView.as_view(), name="job-result"),
    path("jobs/<str:job_id>/cancel/", views.JobCancelView.as_view(), name="job-cancel"),
    path("objects/", object_views.ObjectUploadView.as_view(), name="object-list"),
    path("objects/<str:object_id>/", object_views.ObjectDetailView.as_view(), name="object-detail"),
    path(
        "schema/",
        SpectacularAPIView.as_view(generator_class=LibraryApiSchemaGenerator),
        name="schema",
    ),
]
if apps.is_installed("drf_spectacular"):
    urlpatterns += [
        path("docs/", SpectacularSwaggerView.as_view(url_name="jobs-api:schema"), name="docs"),
        path(
            "redoc/",
            # drf-spectacular's page without its web fonts: nothing but the API's own host.
            SpectacularRedocView.as_view(
                url_name="jobs-api:schema", template_name="jobs/api/redoc.html"
            ),
            name="redoc",
        ),
    ]
urlpatterns.append(re_path(r"^.*$", views.ApiNotFoundView.as_view(), name="not-found"))
