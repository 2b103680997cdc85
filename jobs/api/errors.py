"""One error shape for every API failure: `{"error": {"code", "message", "details"}}`."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent
from django.db import DataError, InterfaceError, OperationalError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from jobs.exceptions import (
    Forbidden,
    IdempotencyConflict,
    InputTooLarge,
    InvalidCallbackUrl,
    InvalidDependency,
    InvalidTransition,
    UnknownKind,
    ValidationFailed,
)

logger = logging.getLogger(__name__)


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state of the resource."
    default_code = "conflict"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


class LengthRequired(exceptions.APIException):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_detail = "A request body needs a Content-Length."
    default_code = "length_required"


class NestingTooDeep(exceptions.ParseError):
    default_detail = "The JSON body nests too deeply."
    default_code = "too_deep"


class DatabaseUnavailable(exceptions.APIException):
    """The database could not be reached (a failover, a partition): retry, not a bug."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = (
        "The database is unreachable; retry shortly (with the same Idempotency-Key, a "
        "submission that did commit is answered with its job)."
    )
    default_code = "unavailable"


# Seconds a client is asked to wait before retrying after a 503 (a failover takes about this).
RETRY_AFTER_UNAVAILABLE = 2


class InvalidHeader(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "A request header has an invalid value."
    default_code = "invalid_header"


def _translate(exc: Exception) -> Exception:
    """Domain exceptions become API exceptions with a stable code; others pass through."""
    if isinstance(exc, IdempotencyConflict):
        return Conflict(str(exc), code="idempotency_conflict")
    if isinstance(exc, InvalidTransition):
        return Conflict(str(exc), code="invalid_transition")
    if isinstance(exc, InputTooLarge):
        return PayloadTooLarge(str(exc), code="input_too_large")
    if isinstance(exc, InvalidCallbackUrl):
        return exceptions.ValidationError({"callback_url": [str(exc)]}, code="invalid")
    if isinstance(exc, UnknownKind):
        return exceptions.ValidationError({"kind": [str(exc)]}, code="unknown_kind")
    if isinstance(exc, InvalidDependency):
        return exceptions.ValidationError({"after": [str(exc)]}, code="invalid_dependency")
    if isinstance(exc, ValidationFailed):
        return exceptions.ValidationError({"input": [str(exc)]}, code="invalid_input")
    if isinstance(exc, Forbidden):
        # Never 403 for another tenant's data: the caller must not learn that it exists.
        return exceptions.NotFound()
    if isinstance(exc, (OperationalError, InterfaceError)):
        return DatabaseUnavailable()
    if isinstance(exc, DataError):
        # Last line of defence: data the database refuses is the client's bad input, not a 500.
        return exceptions.ValidationError(
            {"non_field_errors": ["a value was refused by the database"]}, code="invalid"
        )
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge(str(exc))
    if isinstance(exc, TooManyFieldsSent):
        return exceptions.ParseError(str(exc))
    if isinstance(exc, SuspiciousOperation):
        return exceptions.ParseError("the request could not be parsed")
    return exc


DOMAIN_CODES = frozenset({"unknown_kind", "invalid_input", "invalid_dependency"})


def _code_of(exc: Exception) -> str:
    if isinstance(exc, exceptions.ValidationError):
        codes = exc.get_codes()
        if isinstance(codes, dict):
            for value in codes.values():
                if isinstance(value, list) and value and value[0] in DOMAIN_CODES:
                    return str(value[0])
        return "invalid"
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        return codes if isinstance(codes, str) else exc.default_code
    return "error"


def _message_of(exc: Exception, data: Any) -> str:
    if isinstance(exc, exceptions.ValidationError):
        first = _first_message(data)
        return f"invalid request: {first}" if first else "invalid request"
    if isinstance(data, dict) and "detail" in data:
        return str(data["detail"])
    return str(exc)


def _first_message(data: Any, prefix: str = "") -> str:
    if isinstance(data, dict):
        for key, value in data.items():
            label = prefix if key == "non_field_errors" else f"{prefix}{key}: "
            found = _first_message(value, label)
            if found:
                return found
    elif isinstance(data, list):
        for value in data:
            found = _first_message(value, prefix)
            if found:
                return found
    elif data:
        return f"{prefix}{data}"
    return ""


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF EXCEPTION_HANDLER: DRF's own handling (headers like Retry-After), then our shape."""
    exc = _translate(exc)
    response = exception_handler(exc, context)
    if response is None:
        # A real bug. Log it with its traceback (never the request body) and keep the shape.
        view = context.get("view")
        logger.error("unhandled API error in %s", type(view).__name__, exc_info=exc)
        return Response(
            error_body("server_error", "Internal server error."),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
    details: Any = None
    if isinstance(exc, exceptions.ValidationError):
        details = response.data
    elif isinstance(exc, exceptions.Throttled) and getattr(exc, "wait", None) is not None:
        details = {"retry_after_seconds": int(exc.wait)}  # type: ignore[attr-defined]
    if isinstance(exc, DatabaseUnavailable):
        response["Retry-After"] = str(RETRY_AFTER_UNAVAILABLE)
    response.data = {
        "error": {
            "code": _code_of(exc),
            "message": _message_of(exc, response.data),
            "details": details,
        }
    }
    return response


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}
