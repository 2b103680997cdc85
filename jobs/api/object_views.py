"""`/api/objects/`: uploads too large for a job's JSON, and their metadata."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from jobs.conf import jobs_settings
from jobs.selectors import objects_visible_to

from .base import extend_schema
from .selectors import (
    tenant_for_submission,
    uuid_or_none,
)
from .serializers import (
    ObjectUploadSerializer,
    StoredObjectSerializer,
)
from .services import object_store
from .view_base import ApiView, error_responses

MULTIPART_OVERHEAD_BYTES = 64 * 1024


class ObjectUploadView(ApiView):
    """`/api/objects/`: upload input too large for a job's JSON."""

    serializer_class = ObjectUploadSerializer
    parser_classes = [MultiPartParser, FormParser]

    def body_limit(self) -> int:
        return int(jobs_settings.MAX_OBJECT_BYTES) + MULTIPART_OVERHEAD_BYTES

    @extend_schema(
        summary="Upload an object a job can reference as `input_ref`",
        description=(
            "Stores the `file` part of a multipart form under a server-chosen name and answers "
            "201 with its id, size and SHA-256. A job of the same tenant may name it as "
            "`input_ref`; the worker re-checks access before reading it. Over "
            "JOBS_MAX_OBJECT_BYTES is a 413."
        ),
        request={"multipart/form-data": ObjectUploadSerializer},
        parameters=[OpenApiParameter("Location", str, OpenApiParameter.HEADER, response=[201])],
        responses={201: StoredObjectSerializer, **error_responses(400, 404, 413, 415)},
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
    """`/api/objects/<id>/`: an upload's metadata."""

    serializer_class = StoredObjectSerializer

    @extend_schema(
        summary="An uploaded object's metadata (never its bytes)",
        description=(
            "Id, size, SHA-256, declared content type and tenant of an object you may read. "
            "Anyone else's object is a 404."
        ),
        parameters=[OpenApiParameter("object_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        responses={200: StoredObjectSerializer, **error_responses(404)},
    )
    def get(self, request: Request, object_id: str) -> Response:
        pk = uuid_or_none(object_id)
        found = objects_visible_to(request.user).filter(pk=pk).first() if pk else None
        if found is None:
            raise NotFound("object not found")
        return Response(StoredObjectSerializer(found).data)
