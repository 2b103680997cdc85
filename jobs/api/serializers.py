"""Request and response shapes (they are also the OpenAPI schema)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail
from rest_framework.utils import html

from jobs.callbacks.destination import API_URL_PATTERN, MAX_URL_LENGTH, callback_url_check
from jobs.callbacks.selectors import job_callback_view
from jobs.exceptions import InvalidCallbackUrl
from jobs.links import AFTER_FAILURE_CHOICES, MAX_AFTER
from jobs.models import Job, StoredObject
from jobs.progress import PROGRESS_MESSAGE_MAX_LENGTH
from jobs.states import CLIENT_STATUS, FINISHED, ClientStatus, JobState

from .fields import (
    KIND_MAX_LENGTH,
    KIND_PATTERN,
    NO_NUL_PATTERN,
    SLUG_PATTERN,
    StrictCharField,
    StrictIntegerField,
    StrictUUIDField,
    UploadField,
    pattern_validator,
)


def client_status(job: Job) -> ClientStatus:
    return CLIENT_STATUS[JobState(job.state)]


class ClosedSerializer(serializers.Serializer[dict[str, Any]]):
    """Refuses fields it does not declare: a misspelt `business_key` must not pass unnoticed.

    The schema says so too (`additionalProperties: false`, jobs/api/schema.py).
    """

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data.keys()) - set(self.fields)) if hasattr(data, "keys") else []
        refused: dict[str, Any] = {
            name: [ErrorDetail("unknown field", code="invalid")] for name in unknown
        }
        refused.update(_repeated_parts(data, self.fields))
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if isinstance(exc.detail, dict):
                exc.detail.update(refused)  # one answer names every problem
            raise
        if refused:
            raise serializers.ValidationError(refused)
        return value


def _repeated_parts(data: Any, fields: Iterable[str]) -> dict[str, Any]:
    """A form field given more than once: each field takes one value (the schema's), and a
    form would otherwise keep the last one silently."""
    if not html.is_html_input(data):
        return {}
    return {
        name: [ErrorDetail(f"give this field once, not {count} times", code="invalid")]
        for name in fields
        if (count := len(data.getlist(name))) > 1
    }


class ErrorDetailSerializer(serializers.Serializer[dict[str, Any]]):
    code = serializers.CharField(help_text="Stable machine-readable code, e.g. `not_found`.")
    message = serializers.CharField(help_text="What went wrong, for a human.")
    details = serializers.JSONField(allow_null=True, help_text="Per-field errors, if any.")


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    error = ErrorDetailSerializer()


class JobSubmitSerializer(ClosedSerializer):
    """A job to run: a registered kind and its input; every other field is optional."""

    kind = StrictCharField(
        max_length=KIND_MAX_LENGTH,
        validators=[pattern_validator(KIND_PATTERN, "kind")],
        help_text="A registered job kind, e.g. `noop` or `report.generate`.",
    )
    input = serializers.DictField(
        child=serializers.JSONField(allow_null=True),
        required=False,
        default=dict,
        help_text="JSON object checked against the kind's schema. No string in it, keys "
        "included, may contain U+0000, and it nests at most JOBS_MAX_INPUT_DEPTH levels of "
        "arrays and objects (64 unless the server says otherwise): a 400 otherwise.",
    )
    input_ref = StrictUUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Id of an object uploaded to /api/objects/ (same tenant) the worker may read.",
    )
    business_key = StrictCharField(
        max_length=200,
        required=False,
        allow_null=True,
        default=None,
        validators=[pattern_validator(NO_NUL_PATTERN, "business_key")],
        help_text="One logical job per (kind, business_key, input_version) in your tenant: "
        "a repeat returns the existing job.",
    )
    input_version = StrictIntegerField(min_value=1, max_value=2**31 - 1, required=False, default=1)
    priority = StrictIntegerField(
        min_value=-100,
        max_value=100,
        required=False,
        allow_null=True,
        default=None,
        help_text="-100..100, higher runs first under a backlog (Django's task priority); "
        "omitted or null: the kind's default.",
    )
    serialization_key = StrictCharField(
        max_length=200,
        required=False,
        allow_null=True,
        default=None,
        validators=[pattern_validator(NO_NUL_PATTERN, "serialization_key")],
        help_text="Jobs with the same key run one at a time, in submission order.",
    )
    tenant = StrictCharField(
        max_length=100,
        required=False,
        allow_null=True,
        default=None,
        validators=[pattern_validator(SLUG_PATTERN, "tenant")],
        help_text="Tenant name; defaults to your only tenant.",
    )
    callback_url = StrictCharField(
        max_length=MAX_URL_LENGTH,
        required=False,
        allow_null=True,
        default=None,
        validators=[pattern_validator(API_URL_PATTERN, "callback_url")],
        help_text="An https URL with a host name that receives a signed POST (Standard Webhooks) "
        "once the job succeeds, fails or is cancelled (http only where the server allows it). "
        "A tenant the server has no callback secret for is a 400; a name that resolves to a "
        "private, loopback or link-local address is refused when the callback is sent.",
    )

    def validate_callback_url(self, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return callback_url_check(value)
        except InvalidCallbackUrl as exc:
            raise serializers.ValidationError(str(exc)) from None

    after = serializers.ListField(
        child=StrictUUIDField(),
        required=False,
        default=list,
        max_length=MAX_AFTER,
        help_text="Ids of jobs (yours, or your tenant's) this one waits for: it runs once every "
        "one of them ended (succeeded, failed or cancelled; a quarantined job has not ended). "
        "An id of no job you may name is a 400.",
    )
    after_failure = serializers.ChoiceField(
        choices=list(AFTER_FAILURE_CHOICES),
        required=False,
        default="run",
        help_text="With `after`: `run` (the default) runs this job once they all ended, "
        "whatever their outcome; `cancel` cancels it as soon as one fails or is cancelled.",
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


class JobAcceptedSerializer(serializers.Serializer[dict[str, Any]]):
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


class JobErrorSerializer(serializers.Serializer[dict[str, Any]]):
    category = serializers.CharField()
    message = serializers.CharField()


class JobProgressSerializer(serializers.Serializer[dict[str, Any]]):
    """What the handler last reported (ctx.progress); `total` null when unknown."""

    done = serializers.IntegerField(min_value=0)
    total = serializers.IntegerField(min_value=0, allow_null=True)
    message = serializers.CharField(allow_blank=True, max_length=PROGRESS_MESSAGE_MAX_LENGTH)
    updated_at = serializers.DateTimeField()


class CallbackAttemptSerializer(serializers.Serializer[dict[str, Any]]):
    number = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    outcome = serializers.ChoiceField(choices=["sending", "delivered", "retry", "failed"])
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    duration_ms = serializers.IntegerField(allow_null=True)


class CallbackDeliverySerializer(serializers.Serializer[dict[str, Any]]):
    webhook_id = serializers.CharField(help_text="The `webhook-id` header: the same every try.")
    event = serializers.CharField()
    # Text, not an enum: a second `status` enum would rename the job's own in the schema.
    status = serializers.CharField(help_text="`pending`, `delivered` or `failed`.")
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    attempts = CallbackAttemptSerializer(many=True)


class JobCallbackSerializer(serializers.Serializer[dict[str, Any]]):
    """The job's callback_url and the delivery of its end (null until it ends)."""

    url = serializers.CharField()
    delivery = CallbackDeliverySerializer(allow_null=True)


class JobStatusSerializer(serializers.ModelSerializer[Job]):
    status = serializers.SerializerMethodField()
    attempts = serializers.IntegerField(source="attempt")
    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    result_url = serializers.SerializerMethodField()
    error = serializers.SerializerMethodField()
    cancel_requested = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    # The metaclass pops declared fields: this does not shadow Field.parent (mypy thinks it does).
    parent = serializers.UUIDField(  # type: ignore[assignment]
        source="parent_id",
        allow_null=True,
        help_text="The job whose handler submitted this one (ctx.submit); null otherwise.",
    )
    children = serializers.SerializerMethodField(
        help_text="How many jobs this job's handler submitted (list them: `?parent=<id>`)."
    )
    waiting_for = serializers.IntegerField(
        allow_null=True,
        help_text="With `after`: how many of those jobs have not ended yet (a job waiting for "
        "them is `queued`); null for a job submitted without `after`.",
    )
    callback = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "kind",
            "status",
            "attempts",
            "input_version",
            "business_key",
            "priority",
            "tenant",
            "created_at",
            "started_at",
            "finished_at",
            "cancel_requested",
            "progress",
            "result_url",
            "error",
            "parent",
            "children",
            "waiting_for",
            "callback",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=[s.value for s in ClientStatus]))
    def get_status(self, job: Job) -> str:
        return client_status(job).value

    def get_result_url(self, job: Job) -> str | None:
        return reverse("jobs-api:job-result", args=[job.pk]) if job.job_state in FINISHED else None

    def get_cancel_requested(self, job: Job) -> bool:
        return job.cancel_requested_at is not None

    @extend_schema_field(JobProgressSerializer(allow_null=True))
    def get_progress(self, job: Job) -> dict[str, Any] | None:
        """Only the four reported fields, whatever else the column may hold."""
        value = job.progress
        if not isinstance(value, dict):
            return None
        return {name: value.get(name) for name in ("done", "total", "message", "updated_at")}

    def get_children(self, job: Job) -> int:
        """Annotated by the list (`children_count`); counted for one job."""
        counted = getattr(job, "children_count", None)
        return Job.objects.filter(parent_id=job.pk).count() if counted is None else int(counted)

    @extend_schema_field(JobCallbackSerializer(allow_null=True))
    def get_callback(self, job: Job) -> dict[str, Any] | None:
        """Null without a callback_url (no query then)."""
        return job_callback_view(job)

    @extend_schema_field(JobErrorSerializer(allow_null=True))
    def get_error(self, job: Job) -> dict[str, str] | None:
        if not job.error_category:
            return None
        return {"category": job.error_category, "message": job.error_message}

    def to_representation(self, instance: Job) -> dict[str, Any]:
        """A quarantined job is `failed` to its client, finished when it was quarantined
        (Job.finished_for_client)."""
        data: dict[str, Any] = super().to_representation(instance)
        finished = instance.finished_for_client
        if finished is not None:
            data["finished_at"] = self.fields["finished_at"].to_representation(finished)
        return data


class JobResultSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=[s.value for s in ClientStatus])
    result = serializers.JSONField(allow_null=True)
    error = JobErrorSerializer(allow_null=True)


class CancelSerializer(serializers.Serializer[dict[str, Any]]):
    """Empty body."""


class ObjectUploadSerializer(ClosedSerializer):
    """A multipart form with one `file` part and, optionally, the tenant it belongs to."""

    file = UploadField(allow_empty_file=True, use_url=False, help_text="The bytes to store.")
    tenant = StrictCharField(
        max_length=100,
        required=False,
        default=None,
        validators=[pattern_validator(SLUG_PATTERN, "tenant")],
        help_text="Tenant name; defaults to your only tenant.",
    )


class StoredObjectSerializer(serializers.ModelSerializer[StoredObject]):
    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )

    class Meta:
        model = StoredObject
        fields = ["id", "size", "sha256", "content_type", "tenant", "created_at"]
        read_only_fields = fields
