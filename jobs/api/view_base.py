"""What every API view shares: the refusal of an oversized body before it is read, and the
error answers the schema lists for every operation."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request

from .base import LibraryApiSettings
from .errors import PayloadTooLarge
from .parsers import body_length
from .serializers import (
    ErrorSerializer,
)


def error_responses(*codes: int) -> dict[int, OpenApiResponse]:
    # 503: the database is unreachable (jobs.api.errors.DatabaseUnavailable, Retry-After).
    return {code: OpenApiResponse(ErrorSerializer) for code in (*codes, 401, 429, 503)}


class ApiView(LibraryApiSettings, GenericAPIView):  # type: ignore[type-arg,unused-ignore]
    """Refuses an oversized raw body before anything reads it (413, not a memory spike); a
    chunked body is measured first (jobs.api.parsers.body_length)."""

    max_body_bytes: int | None = None

    def body_limit(self) -> int | None:
        return self.max_body_bytes

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if request.method in {"POST", "PUT", "PATCH"}:
            length = body_length(request._request)
            limit = self.body_limit()
            if limit is not None and length > limit:
                raise PayloadTooLarge(f"request body is {length} bytes, over the limit of {limit}")
        super().initial(request, *args, **kwargs)
