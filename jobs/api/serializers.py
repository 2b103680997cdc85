"""Request and response shapes (they are also the OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.models import Job, StoredObject
from jobs.states import CLIENT_STATUS, FINISHED, ClientStatus, JobState


def client_status(job: Job) -> ClientStatus:
    return CLIENT_STATUS[JobState(job.state)]


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. `not_found`.")
    message = serializers.CharField(help_text="What went wrong, for a human.")
    details = serializers.JSONField(allow_null=True, help_text="Per-field errors, if any.")


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


class JobSubmitSerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=100, help_text="A registered job kind, e.g. `noop`.")
    input = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        default=dict,
        help_text="JSON object checked against the kind's schema.",
    )
    input_ref = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Id of an object uploaded to /api/objects/ (same tenant) the worker may read.",
    )
    business_key = serializers.CharField(
        max_length=200, required=False, allow_null=True, default=None
    )
    input_version = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False, default=1
    )
    serialization_key = serializers.CharField(
        max_length=200, required=False, allow_null=True, default=None
    )
    tenant = serializers.SlugField(
        max_length=100,
        required=False,
        allow_null=True,
        default=None,
        help_text="Tenant name; defaults to your only tenant.",
    )

    def validate_input(self, value: dict[str, Any]) -> dict[str, Any]:
        if _has_nul(value):
            raise serializers.ValidationError("strings in input cannot contain NUL characters")
        return value


def _has_nul(value: Any) -> bool:
    """PostgreSQL text and jsonb cannot hold U+0000 anywhere, keys included."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


class JobAcceptedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=[s.value for s in ClientStatus])
    status_url = serializers.CharField()
    created_at = serializers.DateTimeField()

    @staticmethod
    def of(job: Job) -> dict[str, Any]:
        return {
            "id": job.pk,
            "status": client_status(job).value,
            "status_url": reverse("jobs-api:job-detail", args=[job.pk]),
            "created_at": job.created_at,
        }


class JobErrorSerializer(serializers.Serializer):
    category = serializers.CharField()
    message = serializers.CharField()


class JobStatusSerializer(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()
    attempts = serializers.IntegerField(source="attempt")
    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    result_url = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    cancel_requested = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "kind",
            "status",
            "attempts",
            "input_version",
            "business_key",
            "tenant",
            "created_at",
            "started_at",
            "finished_at",
            "cancel_requested",
            "result_url",
            "error",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=[s.value for s in ClientStatus]))
    def get_status(self, job: Job) -> str:
        return client_status(job).value

    def get_result_url(self, job: Job) -> str | None:
        return reverse("jobs-api:job-result", args=[job.pk]) if job.job_state in FINISHED else None

    def get_cancel_requested(self, job: Job) -> bool:
        return job.cancel_requested_at is not None

    @extend_schema_field(JobErrorSerializer(allow_null=True))
    def get_error(self, job: Job) -> dict[str, str] | None:
        if not job.error_category:
            return None
        return {"category": job.error_category, "message": job.error_message}


class JobResultSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=[s.value for s in ClientStatus])
    result = serializers.JSONField(allow_null=True)
    error = JobErrorSerializer(allow_null=True)


class CancelSerializer(serializers.Serializer):
    """Empty body."""


class ObjectUploadSerializer(serializers.Serializer):
    file = serializers.FileField(allow_empty_file=True, use_url=False)
    tenant = serializers.SlugField(max_length=100, required=False, allow_null=True, default=None)


class StoredObjectSerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )

    class Meta:
        model = StoredObject
        fields = ["id", "size", "sha256", "content_type", "tenant", "created_at"]
        read_only_fields = fields
