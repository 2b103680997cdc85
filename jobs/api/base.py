"""The API's own DRF settings: mounted in any project, it reads nothing from REST_FRAMEWORK.

`include("jobs.api.urls")` brings views that carry their authentication, permissions,
throttles, renderer, error shape and schema class, so the host project's REST_FRAMEWORK
(which shapes its other APIs) neither changes them nor is changed by them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from django.apps import apps
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema as spectacular_extend_schema
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
)
from rest_framework.metadata import BaseMetadata, SimpleMetadata
from rest_framework.negotiation import BaseContentNegotiation, DefaultContentNegotiation
from rest_framework.pagination import BasePagination
from rest_framework.parsers import BaseParser, FormParser, MultiPartParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.schemas.inspectors import ViewInspector
from rest_framework.throttling import BaseThrottle
from rest_framework.versioning import BaseVersioning
from rest_framework.views import APIView

from .errors import api_exception_handler
from .parsers import DepthLimitedJSONParser
from .throttles import TenantRateThrottle, UserRateThrottle

if TYPE_CHECKING:
    from rest_framework.permissions import _PermissionClass

F = TypeVar("F", bound=Callable[..., Any])


# DRF's token app: without it the API takes sessions only and jobs_token refuses (jobs.W002).
TOKEN_APP = "rest_framework.authtoken"


def api_authentication_classes() -> list[type[BaseAuthentication]]:
    """`Authorization: Token <key>` where DRF's token app is installed, and sessions."""
    if apps.is_installed(TOKEN_APP):
        return [TokenAuthentication, SessionAuthentication]
    return [SessionAuthentication]


class LibraryApiSettings(APIView):
    """The base of every view of the API (before DRF's generic view class, if any)."""

    permission_classes: Sequence[_PermissionClass] = [IsAuthenticated]
    throttle_classes: Sequence[type[BaseThrottle]] = [UserRateThrottle, TenantRateThrottle]
    renderer_classes: Sequence[type[BaseRenderer]] = [JSONRenderer]
    # DRF's defaults, JSON with its nesting bounded; a view that takes one body type narrows them.
    parser_classes: Sequence[type[BaseParser]] = [
        DepthLimitedJSONParser,
        FormParser,
        MultiPartParser,
    ]
    content_negotiation_class: type[BaseContentNegotiation] = DefaultContentNegotiation
    metadata_class: str | type[BaseMetadata] | None = SimpleMetadata
    versioning_class: type[BaseVersioning] | None = None
    pagination_class: type[BasePagination] | None = None
    schema: ViewInspector | None = AutoSchema()

    def get_authenticators(self) -> list[BaseAuthentication]:
        return [cls() for cls in api_authentication_classes()]

    def get_exception_handler(self) -> Callable[..., Response | None]:
        return api_exception_handler


class LibraryApiSchemaGenerator(SchemaGenerator):
    """The schema of this API only, wherever it is mounted: the host project's other views
    (with their own schema classes, or none) are not part of it."""

    def _initialise_endpoints(self) -> None:
        # Named, not super(): mypy's untyped_calls_exclude (drf_spectacular) sees only this.
        SchemaGenerator._initialise_endpoints(self)
        endpoints: list[Any] = list(self.endpoints or [])  # (path, regex, method, callback)
        self.endpoints = [
            endpoint
            for endpoint in endpoints
            if issubclass(getattr(endpoint[-1], "cls", object), LibraryApiSettings)
        ]


def extend_schema(**kwargs: Any) -> Callable[[F], F]:
    """drf-spectacular's `extend_schema`, built on its AutoSchema whatever the project's
    DEFAULT_SCHEMA_CLASS says (on a view method the decorator otherwise builds on that
    setting, and the schema of a project that does not name drf-spectacular breaks)."""
    decorate = spectacular_extend_schema(**kwargs)

    def decorator(f: F) -> F:
        if inspect.isclass(f) or hasattr(f, "schema") or "schema" in getattr(f, "kwargs", {}):
            return decorate(f)
        f.schema = AutoSchema  # type: ignore[attr-defined]
        try:
            return decorate(f)
        finally:
            del f.schema  # type: ignore[attr-defined]

    return decorator
