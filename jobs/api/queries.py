"""The query strings of the job endpoints: filters, pagination, the long-poll's wait (they
are also the OpenAPI schema's parameters)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs.states import ClientStatus

from .fields import (
    KIND_MAX_LENGTH,
    KIND_PATTERN,
    PAGE_SIZE_DEFAULT,
    PAGE_SIZE_MAX,
    QueryIntegerField,
    QueryNumberField,
    StrictCharField,
    pattern_validator,
)


class JobListQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """The filters of `GET /api/jobs/` (pagination is JobPagination's)."""

    status = serializers.ChoiceField(
        choices=[s.value for s in ClientStatus],
        required=False,
        help_text="Only jobs in this status.",
    )
    kind = StrictCharField(
        max_length=KIND_MAX_LENGTH,
        required=False,
        validators=[pattern_validator(KIND_PATTERN, "kind")],
        help_text="Only jobs of this kind.",
    )
    parent = serializers.UUIDField(  # type: ignore[assignment]
        required=False, help_text="Only the jobs this job's handler submitted (ctx.submit)."
    )


class JobPageQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """Pagination of `GET /api/jobs/`: page numbers only (no `last`), bounded page sizes."""

    page = QueryIntegerField(
        min_value=1,
        max_value=2**31 - 1,
        required=False,
        help_text="Page number, from 1; past the last page is a 404.",
    )
    page_size = QueryIntegerField(
        min_value=1,
        max_value=PAGE_SIZE_MAX,
        required=False,
        help_text=f"Jobs per page (default {PAGE_SIZE_DEFAULT}).",
    )


class JobWaitQuerySerializer(serializers.Serializer[dict[str, Any]]):
    wait = QueryNumberField(
        min_value=0,
        required=False,
        help_text="Wait up to this many seconds (capped by JOBS_API_MAX_WAIT_SECONDS) for the "
        "status to change; 0 answers at once.",
    )
