"""Fields as strict as the schema they publish: patterns, JSON types, no silent fixing."""

from __future__ import annotations

import re
from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils import html

# Patterns are anchored with \A...\Z (the schema shows them as ^...$): `$` alone would let a
# trailing newline through, which the published pattern forbids.
from jobs.registry import KIND_MAX_LENGTH as KIND_MAX_LENGTH
from jobs.registry import KIND_PATTERN as KIND_PATTERN

# Visible ASCII: what HTTP carries unchanged in a header, and what a key needs.
IDEMPOTENCY_KEY_PATTERN = r"\A[!-~]+\Z"
IDEMPOTENCY_KEY_MAX_LENGTH = 200
# PostgreSQL text cannot hold U+0000; everything else is the client's business.
NO_NUL_PATTERN = r"\A[^\x00]+\Z"
# What a string anywhere in a job's input is held to (JobSubmitSerializer.validate_input), in
# the spelling drf-spectacular publishes NO_NUL_PATTERN in.
NO_NUL_SCHEMA_PATTERN = "^[^\\u0000]*$"
SLUG_PATTERN = r"\A[-a-zA-Z0-9_]+\Z"
PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 200
# How a query string spells a JSON number / integer (no "inf", "+1", " 1" or "0x10").
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"-?[0-9]{1,4000}")  # int() refuses more than 4300 digits
# The canonical spelling only (`format: uuid`), not every form uuid.UUID() would take.
UUID_PATTERN = r"\A[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\Z"


def pattern_validator(regex: str, what: str) -> RegexValidator:
    return RegexValidator(regex, message=f"{what} must match {regex_for_schema(regex)}")


def regex_for_schema(regex: str) -> str:
    """The ECMA spelling of an anchored Python pattern (what drf-spectacular publishes)."""
    return regex.replace(r"\A", "^").replace(r"\Z", "$")


class StrictCharField(serializers.CharField):
    """A JSON string and nothing else: no numbers turned into text, no silent trimming."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def get_value(self, dictionary: Any) -> Any:
        # In a form, DRF reads an empty optional field as absent; here it is an empty string.
        if html.is_html_input(dictionary) and self.field_name in dictionary:
            return dictionary.get(self.field_name)
        return super().get_value(dictionary)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictUUIDField(serializers.UUIDField):
    """A UUID in its canonical 8-4-4-4-12 spelling, as `format: uuid` says."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str) or not re.fullmatch(UUID_PATTERN, data):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: no strings, floats or booleans."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
        self.fail("invalid")


class QueryIntegerField(serializers.IntegerField):
    """A decimal integer in a query string: no "5.0", "+5", " 5" or "last"."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, str) and _INTEGER.fullmatch(data):
            return int(data)
        self.fail("invalid")


class QueryNumberField(serializers.FloatField):
    """A JSON number in a query string; too large for a float means "as much as allowed"."""

    def to_internal_value(self, data: Any) -> float:
        if not isinstance(data, str) or not _NUMBER.fullmatch(data):
            self.fail("invalid")
        return float(data)  # may be inf: still a non-negative number, capped by the view


@extend_schema_field(OpenApiTypes.BINARY)
class UploadField(serializers.FileField):
    """A multipart file part (`format: binary`): a plain form value is not a file."""
