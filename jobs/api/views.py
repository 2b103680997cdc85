"""Thin views: parse, call one service or selector, shape the answer."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from jobs.callbacks.selectors import with_callback_deliveries
from jobs.conf import jobs_settings
from jobs.selectors import jobs_visible_to
from jobs.services import job_cancel
from jobs.states import FINISHED, ClientStatus, JobState, states_for_client_status
from jobs.submission import job_submit

from . import schema  # noqa: F401  (registers the drf-spectacular extensions)
from .base import LibraryApiSettings, extend_schema
from .errors import Conflict, InvalidHeader
from .fields import (
    IDEMPOTENCY_KEY_MAX_LENGTH,
    IDEMPOTENCY_KEY_PATTERN,
    PAGE_SIZE_DEFAULT,
    regex_for_schema,
)
from .parsers import DepthLimitedJSONParser
from .queries import JobListQuerySerializer, JobPageQuerySerializer, JobWaitQuerySerializer
from .selectors import (
    job_visible_or_404,
    job_wait_for_status_change,
    jobs_with_children_count,
    object_for_job_or_404,
    tenant_for_submission,
)
from .serializers import (
    CancelSerializer,
    JobAcceptedSerializer,
    JobResultSerializer,
    JobStatusSerializer,
    JobSubmitSerializer,
    client_status,
)
from .view_base import ApiView, error_responses

REPLAYED_HEADER = "Idempotent-Replayed"
# Room for the JSON envelope around `input` (kind, keys, tenant...) before the raw body is refused.
ENVELOPE_BYTES = 8 * 1024


_JOB_ID = OpenApiParameter("job_id", OpenApiTypes.UUID, OpenApiParameter.PATH)
_IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {
        "type": "string",
        "minLength": 1,
        "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH,
        "pattern": regex_for_schema(IDEMPOTENCY_KEY_PATTERN),
    },
    OpenApiParameter.HEADER,
    description="1 to 200 visible ASCII characters. A repeat with the same key and body returns "
    "the same job (`Idempotent-Replayed: true`); the same key with another body is a 409.",
)


def _idempotency_key(request: Request) -> str | None:
    """The header exactly as sent (no trimming): what the schema's pattern describes."""
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if len(key) > IDEMPOTENCY_KEY_MAX_LENGTH or not re.fullmatch(IDEMPOTENCY_KEY_PATTERN, key):
        raise InvalidHeader("Idempotency-Key must be 1 to 200 visible ASCII characters")
    return key


def _query(request: Request, serializer_class: type[Serializer[dict[str, Any]]]) -> dict[str, Any]:
    """The validated query parameters a serializer declares; a repeated one is a 400 too."""
    serializer = serializer_class(data=_single_values(request, serializer_class().fields))
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _single_values(request: Request, names: Iterable[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for name in names:
        given = request.query_params.getlist(name)
        if len(given) > 1:
            raise ValidationError({name: ["give this parameter at most once"]})
        if given:
            values[name] = given[0]
    return values


def _wait_seconds(request: Request) -> float:
    wait = _query(request, JobWaitQuerySerializer).get("wait", 0.0)
    return float(min(wait, float(jobs_settings.API_MAX_WAIT_SECONDS)))


class JobPagination(PageNumberPagination):
    """Page numbers and sizes are checked like any other parameter: bad ones are a 400."""

    page_size = PAGE_SIZE_DEFAULT  # PAGE_SIZE_MAX is the serializer's: a larger one is a 400

    def get_page_size(self, request: Request) -> int:
        return int(_query(request, JobPageQuerySerializer).get("page_size", self.page_size))

    def get_page_number(self, request: Request, paginator: Any) -> int:
        return int(_query(request, JobPageQuerySerializer).get("page", 1))


class JobListCreateView(ApiView):
    """`/api/jobs/`: list the jobs you may see, or submit one."""

    serializer_class = JobStatusSerializer
    pagination_class = JobPagination

    parser_classes = [DepthLimitedJSONParser]

    def body_limit(self) -> int:
        return int(jobs_settings.MAX_INPUT_BYTES) + ENVELOPE_BYTES

    @extend_schema(
        summary="List the jobs you may see",
        description=(
            "Your jobs and your tenants' jobs, newest first, paginated. Filter by client status "
            "and by kind, or list the jobs one job's handler submitted (`parent`). A parameter "
            "that does not match its schema, or that is given twice, is "
            "a 400; a page past the last one is a 404."
        ),
        parameters=[JobListQuerySerializer, JobPageQuerySerializer],
        responses={200: JobStatusSerializer(many=True), **error_responses(400, 404)},
    )
    def get(self, request: Request) -> Response:
        jobs = jobs_visible_to(request.user).select_related("tenant").order_by("-created_at", "id")
        query = _query(request, JobListQuerySerializer)
        if "status" in query:
            states = states_for_client_status(ClientStatus(query["status"]))
            jobs = jobs.filter(state__in=[s.value for s in states])
        if "kind" in query:
            jobs = jobs.filter(kind=query["kind"])
        if "parent" in query:
            jobs = jobs.filter(parent_id=query["parent"])
        page = self.paginate_queryset(with_callback_deliveries(jobs_with_children_count(jobs)))
        return self.get_paginated_response(JobStatusSerializer(page, many=True).data)

    @extend_schema(
        summary="Submit a job (202 once it is durably recorded)",
        description=(
            "Records the job and its outbox message in one transaction, then answers 202 with "
            "the status URL in `Location`. `input` is checked against the kind's input schema. "
            "An `Idempotency-Key` or a `business_key` makes a repeat return the same job; the "
            "same key with a different body is a 409. A body over the size limit is a 413 and "
            "is never parsed."
        ),
        request=JobSubmitSerializer,
        parameters=[
            _IDEMPOTENCY_KEY,
            OpenApiParameter("Location", str, OpenApiParameter.HEADER, response=[202]),
            OpenApiParameter(
                REPLAYED_HEADER,
                str,
                OpenApiParameter.HEADER,
                response=[202],
                enum=["true", "false"],
            ),
        ],
        responses={202: JobAcceptedSerializer, **error_responses(400, 404, 409, 413, 415)},
        examples=[
            OpenApiExample("no-op", value={"kind": "noop", "input": {}}, request_only=True),
            OpenApiExample(
                "report",
                value={
                    "kind": "report.generate",
                    "input": {"title": "Q3", "rows": [[1, 2]]},
                    "business_key": "report-q3",
                },
                request_only=True,
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        key = _idempotency_key(request)
        serializer = JobSubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        tenant = tenant_for_submission(user=request.user, name=data["tenant"])
        input_ref = None
        if data["input_ref"] is not None:
            input_ref = object_for_job_or_404(
                user=request.user, object_id=data["input_ref"], tenant=tenant
            )
        job = job_submit(
            kind=data["kind"],
            input=data["input"],
            owner=request.user,  # type: ignore[arg-type]  # IsAuthenticated
            tenant=tenant,
            business_key=data["business_key"],
            input_version=data["input_version"],
            idempotency_key=key,
            serialization_key=data["serialization_key"],
            input_ref=input_ref,
            priority=data["priority"],
            after=data["after"],
            after_failure=data["after_failure"],
            callback_url=data["callback_url"],
        )
        replayed = job.replayed
        if replayed and not jobs_visible_to(request.user).filter(pk=job.pk).exists():
            # business_key is global: never hand out someone else's job as "your" replay.
            raise Conflict(
                "a job with this kind, business_key and input_version already exists",
                code="idempotency_conflict",
            )
        return Response(
            JobAcceptedSerializer.of(job),
            status=status.HTTP_202_ACCEPTED,
            headers={
                "Location": reverse("jobs-api:job-detail", args=[job.pk]),
                REPLAYED_HEADER: "true" if replayed else "false",
            },
        )


class JobDetailView(ApiView):
    """`/api/jobs/<id>/`: one job's status.

    Mounted through jobs.api.long_poll, which does the `?wait=` waiting itself, asynchronously
    (`wait_outside`), re-reading the job through this view (`rereading`: no throttle charge).
    """

    serializer_class = JobStatusSerializer
    wait_outside = False  # answer at once; mark the response with the wait still to do
    rereading = False  # a long-poll's later read: authenticated and checked, not throttled

    def get_throttles(self) -> list[Any]:
        return [] if self.rereading else super().get_throttles()

    @extend_schema(
        summary="A job's honest status; `?wait=SECONDS` long-polls for a change",
        description=(
            "The job's client status, attempts, timestamps and error. With `wait`, answers as "
            "soon as the status changes or the (capped) wait ends. A job you may not see is a "
            "404, never a 403."
        ),
        parameters=[_JOB_ID, JobWaitQuerySerializer],
        responses={200: JobStatusSerializer, **error_responses(400, 404)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        wait = _wait_seconds(request)
        job = job_visible_or_404(user=request.user, job_id=job_id)
        if wait > 0 and not self.wait_outside:
            job = job_wait_for_status_change(
                user=request.user,
                job=job,
                wait=wait,
                interval=float(jobs_settings.API_POLL_INTERVAL),
            )
        response = Response(JobStatusSerializer(job).data)
        if wait > 0 and self.wait_outside and job.job_state not in FINISHED:
            response.long_poll_seconds = wait  # type: ignore[attr-defined]
        return response


class JobResultView(ApiView):
    """`/api/jobs/<id>/result/`: what a finished job produced."""

    serializer_class = JobResultSerializer

    @extend_schema(
        summary="A finished job's result (409 while it is not finished)",
        description=(
            "The handler's result for a succeeded job, or the error category and message for a "
            "failed or cancelled one. Visibility is checked again at the moment of release."
        ),
        parameters=[_JOB_ID],
        responses={200: JobResultSerializer, **error_responses(404, 409)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        # Read through current visibility at the moment of release: revoked members get 404.
        job = job_visible_or_404(user=request.user, job_id=job_id)
        if job.job_state not in FINISHED:
            raise Conflict(
                f"job is {client_status(job).value}; its result exists once it has finished",
                code="not_finished",
            )
        succeeded = job.job_state == JobState.SUCCEEDED
        error = (
            {"category": job.error_category, "message": job.error_message}
            if job.error_category
            else None
        )
        return Response(
            {
                "id": job.pk,
                "status": client_status(job).value,
                "result": job.result if succeeded else None,
                "error": error,
            }
        )


class JobCancelView(ApiView):
    """`/api/jobs/<id>/cancel/`: stop a job."""

    serializer_class = CancelSerializer

    @extend_schema(
        summary="Cancel a waiting job now, or ask a running one to stop (202)",
        description=(
            "A queued or retrying job is cancelled at once (200). A running job is asked to stop "
            "and finishes on its own (202). Cancelling a cancelled job again is a 200; a job that "
            "already finished otherwise is a 409. No request body."
        ),
        request=None,
        parameters=[_JOB_ID],
        responses={
            200: JobStatusSerializer,
            202: JobStatusSerializer,
            **error_responses(404, 409),
        },
    )
    def post(self, request: Request, job_id: str) -> Response:
        job = job_visible_or_404(user=request.user, job_id=job_id)
        job = job_cancel(job_id=job.pk, actor=f"api:{request.user.get_username()}")
        still_running = job.job_state == JobState.LEASED
        return Response(
            JobStatusSerializer(job).data,
            status=status.HTTP_202_ACCEPTED if still_running else status.HTTP_200_OK,
        )


@extend_schema(exclude=True)
class ApiNotFoundView(LibraryApiSettings, APIView):
    """Any other path under /api/: the JSON 404 (no HTML page, no slash redirect)."""

    permission_classes: list[Any] = []
    throttle_classes: list[Any] = []

    def get_authenticators(self) -> list[Any]:
        return []

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Raised before method dispatch, so every method gets the 404 rather than a 405.
        raise NotFound(f"no API endpoint at {request.path} (API paths end with a slash)")
