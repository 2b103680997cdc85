"""Thin views: parse, call one service or selector, shape the answer."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.pagination import PageNumberPagination
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.selectors import jobs_visible_to, objects_visible_to
from jobs.services import job_cancel, job_submit
from jobs.states import FINISHED, ClientStatus, JobState, states_for_client_status

from .errors import Conflict, InvalidHeader, PayloadTooLarge
from .selectors import (
    job_visible_or_404,
    job_wait_for_status_change,
    object_for_job_or_404,
    tenant_for_submission,
    uuid_or_none,
)
from .serializers import (
    CancelSerializer,
    ErrorSerializer,
    JobAcceptedSerializer,
    JobResultSerializer,
    JobStatusSerializer,
    JobSubmitSerializer,
    ObjectUploadSerializer,
    StoredObjectSerializer,
    client_status,
)
from .services import object_store

REPLAYED_HEADER = "Idempotent-Replayed"
# Room for the JSON envelope around `input` (kind, keys, tenant...) before the raw body is refused.
ENVELOPE_BYTES = 8 * 1024
MULTIPART_OVERHEAD_BYTES = 64 * 1024


def _errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: OpenApiResponse(ErrorSerializer) for code in (*codes, 401, 429)}


_JOB_ID = OpenApiParameter("job_id", OpenApiTypes.UUID, OpenApiParameter.PATH)


class ApiView(GenericAPIView):  # type: ignore[type-arg,unused-ignore]
    """Refuses an oversized raw body before anything reads it (413, not a memory spike)."""

    max_body_bytes: int | None = None

    def body_limit(self) -> int | None:
        return self.max_body_bytes

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        limit = self.body_limit()
        if limit is not None and request.method in {"POST", "PUT", "PATCH"}:
            raw = request.META.get("CONTENT_LENGTH") or "0"
            try:
                length = int(raw)
            except ValueError:
                raise ParseError("Content-Length is not a number") from None
            if length > limit:
                raise PayloadTooLarge(f"request body is {length} bytes, over the limit of {limit}")
        super().initial(request, *args, **kwargs)


def _idempotency_key(request: Request) -> str | None:
    raw = request.headers.get("Idempotency-Key")
    if raw is None:
        return None
    key = raw.strip()
    if not 1 <= len(key) <= 200 or not all(0x21 <= ord(ch) <= 0x7E for ch in key):
        raise InvalidHeader("Idempotency-Key must be 1 to 200 visible ASCII characters")
    return key


def _wait_seconds(request: Request) -> float:
    raw = request.query_params.get("wait")
    if raw in (None, ""):
        return 0.0
    try:
        wait = float(raw)
    except ValueError:
        raise ValidationError({"wait": ["must be a number of seconds"]}) from None
    if not 0 <= wait < float("inf"):
        raise ValidationError({"wait": ["must be a non-negative number of seconds"]})
    return min(wait, float(settings.JOBS_API_MAX_WAIT_SECONDS))


class JobPagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


class JobListCreateView(ApiView):
    serializer_class = JobStatusSerializer
    pagination_class = JobPagination

    parser_classes = [JSONParser]

    def body_limit(self) -> int:
        return int(settings.JOBS_MAX_INPUT_BYTES) + ENVELOPE_BYTES

    @extend_schema(
        summary="List the jobs you may see",
        parameters=[
            OpenApiParameter("status", str, enum=[s.value for s in ClientStatus]),
            OpenApiParameter("kind", str),
        ],
        responses={200: JobStatusSerializer(many=True), **_errors(400, 404)},
    )
    def get(self, request: Request) -> Response:
        jobs = jobs_visible_to(request.user).select_related("tenant").order_by("-created_at", "id")
        wanted = request.query_params.get("status")
        if wanted:
            if wanted not in {s.value for s in ClientStatus}:
                raise ValidationError({"status": [f"unknown status {wanted!r}"]})
            states = states_for_client_status(ClientStatus(wanted))
            jobs = jobs.filter(state__in=[s.value for s in states])
        kind = request.query_params.get("kind")
        if kind and ("\x00" in kind or len(kind) > 100):
            raise ValidationError({"kind": ["not a valid kind name"]})
        if kind:
            jobs = jobs.filter(kind=kind)
        page = self.paginate_queryset(jobs)
        return self.get_paginated_response(JobStatusSerializer(page, many=True).data)

    @extend_schema(
        summary="Submit a job (202 once it is durably recorded)",
        request=JobSubmitSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                description="Replays with the same key and body return the same job.",
            ),
            OpenApiParameter("Location", str, OpenApiParameter.HEADER, response=[202]),
            OpenApiParameter(
                REPLAYED_HEADER,
                str,
                OpenApiParameter.HEADER,
                response=[202],
                enum=["true", "false"],
            ),
        ],
        responses={202: JobAcceptedSerializer, **_errors(400, 404, 409, 413, 415)},
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
        )
        replayed = bool(getattr(job, "replayed", False))
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
    serializer_class = JobStatusSerializer

    @extend_schema(
        summary="A job's honest status; `?wait=SECONDS` long-polls for a change",
        parameters=[
            _JOB_ID,
            OpenApiParameter(
                "wait",
                float,
                description="Wait up to this many seconds (capped) for the status to change.",
            ),
        ],
        responses={200: JobStatusSerializer, **_errors(400, 404)},
    )
    def get(self, request: Request, job_id: str) -> Response:
        wait = _wait_seconds(request)
        job = job_visible_or_404(user=request.user, job_id=job_id)
        if wait > 0:
            job = job_wait_for_status_change(
                user=request.user,
                job=job,
                wait=wait,
                interval=float(settings.JOBS_API_POLL_INTERVAL),
            )
        return Response(JobStatusSerializer(job).data)


class JobResultView(ApiView):
    serializer_class = JobResultSerializer

    @extend_schema(
        summary="A finished job's result (409 while it is not finished)",
        parameters=[_JOB_ID],
        responses={200: JobResultSerializer, **_errors(404, 409)},
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
    serializer_class = CancelSerializer

    @extend_schema(
        summary="Cancel a waiting job now, or ask a running one to stop (202)",
        request=None,
        parameters=[_JOB_ID],
        responses={
            200: JobStatusSerializer,
            202: JobStatusSerializer,
            **_errors(404, 409),
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


class ObjectUploadView(ApiView):
    serializer_class = ObjectUploadSerializer
    parser_classes = [MultiPartParser, FormParser]

    def body_limit(self) -> int:
        return int(settings.JOBS_MAX_OBJECT_BYTES) + MULTIPART_OVERHEAD_BYTES

    @extend_schema(
        summary="Upload an object a job can reference as `input_ref`",
        request={"multipart/form-data": ObjectUploadSerializer},
        parameters=[OpenApiParameter("Location", str, OpenApiParameter.HEADER, response=[201])],
        responses={201: StoredObjectSerializer, **_errors(400, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        serializer = ObjectUploadSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        tenant = tenant_for_submission(user=request.user, name=serializer.validated_data["tenant"])
        stored = object_store(
            owner=request.user, tenant=tenant, upload=serializer.validated_data["file"]
        )
        return Response(
            StoredObjectSerializer(stored).data,
            status=status.HTTP_201_CREATED,
            headers={"Location": reverse("jobs-api:object-detail", args=[stored.pk])},
        )


class ObjectDetailView(ApiView):
    serializer_class = StoredObjectSerializer

    @extend_schema(
        summary="An uploaded object's metadata (never its bytes)",
        parameters=[OpenApiParameter("object_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        responses={200: StoredObjectSerializer, **_errors(404)},
    )
    def get(self, request: Request, object_id: str) -> Response:
        pk = uuid_or_none(object_id)
        found = objects_visible_to(request.user).filter(pk=pk).first() if pk else None
        if found is None:
            raise NotFound("object not found")
        return Response(StoredObjectSerializer(found).data)


@extend_schema(exclude=True)
class ApiNotFoundView(APIView):
    """Any other path under /api/: the JSON 404 (no HTML page, no slash redirect)."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []
    throttle_classes: list[Any] = []

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Raised before method dispatch, so every method gets the 404 rather than a 405.
        raise NotFound(f"no API endpoint at {request.path}; paths end with a slash")
