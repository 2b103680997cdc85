"""Thin views: the /ops/ page for staff and /metrics for Prometheus (staff or bearer token)."""

from __future__ import annotations

import hmac

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from jobs.conf import jobs_settings

from .dashboard import ops_snapshot
from .metrics import metrics_registry


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def _bearer_ok(request: HttpRequest) -> bool | None:
    """True/False for a presented bearer token; None when none was presented."""
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    expected = jobs_settings.METRICS_TOKEN
    if scheme.lower() != "bearer" or not expected:
        return False
    return hmac.compare_digest(token.strip().encode(), expected.encode())


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus exposition; values are read from the database now."""
    bearer = _bearer_ok(request)
    if bearer is False:
        return _error(401, "not_authenticated", "invalid metrics token")
    if bearer is None:
        if not request.user.is_authenticated:
            return _error(
                401,
                "not_authenticated",
                "send Authorization: Bearer <JOBS_METRICS_TOKEN> or log in as staff",
            )
        if not request.user.is_staff:
            return _error(403, "permission_denied", "metrics are for staff only")
    return HttpResponse(generate_latest(metrics_registry()), content_type=CONTENT_TYPE_LATEST)


@staff_member_required
@require_GET
def ops_index(request: HttpRequest) -> HttpResponse:
    """The operator's one page: backlog, ages, throughput, leases, quarantine, outbox, workers."""
    return render(request, "jobs/ops/index.html", {"ops": ops_snapshot()})
