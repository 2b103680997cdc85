"""Per-user and per-tenant rate limits (429 with Retry-After, from DRF's Throttled)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from jobs.conf import jobs_settings

from .selectors import tenant_for_submission_or_none


class _SettingRateThrottle(SimpleRateThrottle):
    """Reads its rate from a JOBS_* setting at request time, so overrides apply at once."""

    setting_name = ""  # the name in jobs_settings, e.g. "THROTTLE_USER"

    def get_rate(self) -> str | None:
        rate = getattr(jobs_settings, self.setting_name) or ""
        return None if rate.strip().lower() in {"", "none", "off"} else rate

    def allow_request(self, request: Request, view: Any) -> bool:
        # SimpleRateThrottle reads the rate once in __init__; DRF builds throttles per request.
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)


class UserRateThrottle(_SettingRateThrottle):
    """Every API request of one user (JOBS_THROTTLE_USER, e.g. "600/min")."""

    scope = "user"
    setting_name = "THROTTLE_USER"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not request.user or not request.user.is_authenticated:
            return None  # authentication answers 401 before this matters
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


class TenantRateThrottle(_SettingRateThrottle):
    """Submissions and uploads into one tenant, all members together (JOBS_THROTTLE_TENANT)."""

    scope = "tenant"
    setting_name = "THROTTLE_TENANT"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.method != "POST" or not request.user or not request.user.is_authenticated:
            return None
        data = request.data
        name = data.get("tenant") if hasattr(data, "get") else None
        tenant = tenant_for_submission_or_none(
            user=request.user, name=name if isinstance(name, str) else None
        )
        if tenant is None:
            return None  # an invalid tenant is answered by the view with a 400
        return self.cache_format % {"scope": self.scope, "ident": tenant.pk}
