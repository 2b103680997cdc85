"""What drf-spectacular cannot infer: closed bodies, and one submit shape per registered kind.

The published schema is the API's exact contract (tests/integration/test_api_fuzz.py runs
schemathesis with every check against it): a request it accepts is never refused as
malformed, and one it refuses is a 400.
"""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension

from jobs import registry
from jobs.exceptions import ValidationFailed

from .fields import KIND_PATTERN, NO_NUL_SCHEMA_PATTERN

# The keywords that mean the same in an OpenAPI 3.0 Schema Object and in the JSON Schema the
# registry validates with. A kind's input schema that uses others (`const`, `$defs`, numeric
# `exclusiveMinimum`, `format`, which jsonschema does not assert...) is published as "an
# object" rather than as an invalid or misleading document; docs/handlers.md says so.
OPENAPI_30_KEYWORDS = frozenset(
    {
        "title",
        "description",
        "type",
        "enum",
        "default",
        "multipleOf",
        "maximum",
        "minimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxProperties",
        "minProperties",
        "required",
        "properties",
        "additionalProperties",
        "items",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
    }
)


class ClosedSerializerSchema(OpenApiSerializerExtension):
    """`additionalProperties: false` for serializers that refuse undeclared fields."""

    target_class = "jobs.api.serializers.ClosedSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        return {**schema, "additionalProperties": False}


class JobSubmitSchema(ClosedSerializerSchema):
    """One alternative per kind the API takes: its name, and its input schema where it has one.

    Kinds outside KIND_PATTERN (Django tasks' `task:...`) are registered but never submitted
    over HTTP, so they are not offered.
    """

    target_class = "jobs.api.serializers.JobSubmitSerializer"
    match_subclasses = False
    priority = 1

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        common = super().map_serializer(auto_schema, direction)
        alternatives = [
            _submit_of_kind(kind) for kind in registry.kinds() if re.fullmatch(KIND_PATTERN, kind)
        ]
        return {**common, "oneOf": alternatives} if alternatives else common


def _submit_of_kind(kind: str) -> dict[str, Any]:
    """What one kind adds to the common shape: its name, and its input schema if any."""
    spec = registry.kind_latest(kind)
    # Wrapped in allOf: drf-spectacular's enum hook would merge every alternative's `kind`
    # into one shared enum component.
    properties: dict[str, Any] = {"kind": {"allOf": [{"type": "string", "enum": [kind]}]}}
    required = ["kind"]
    if spec.input_schema is not None and _is_openapi_30(spec.input_schema):
        properties["input"] = _strings_without_nul(spec.input_schema)
        try:
            spec.validate({})
        except ValidationFailed:
            required.append("input")  # `input` defaults to {}, which this kind refuses
    return {"title": kind, "type": "object", "properties": properties, "required": required}


def _strings_without_nul(schema: Any) -> Any:
    """A kind's input schema as the API holds it: no string in the input may contain U+0000
    (JobSubmitSerializer.validate_input), so each string schema says so with a pattern.

    Not under `not`, where the added rule would turn around; property names cannot be
    constrained in OpenAPI 3.0 (no propertyNames), the input's description says it.
    """
    if not isinstance(schema, dict):
        return schema
    published = dict(schema)
    if "properties" in published:
        published["properties"] = {
            name: _strings_without_nul(sub) for name, sub in published["properties"].items()
        }
    for key in ("items", "additionalProperties"):
        if key in published:
            published[key] = _strings_without_nul(published[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in published:
            published[key] = [_strings_without_nul(sub) for sub in published[key]]
    if published.get("type") != "string" or "enum" in published:
        return published
    if "pattern" in published:  # both patterns must hold
        return {"allOf": [published, {"pattern": NO_NUL_SCHEMA_PATTERN}]}
    return {**published, "pattern": NO_NUL_SCHEMA_PATTERN}


def _is_openapi_30(schema: Any) -> bool:
    """Whether a JSON Schema uses only keywords an OpenAPI 3.0 document may contain."""
    if not isinstance(schema, dict):
        return isinstance(schema, bool)
    if not set(schema) <= OPENAPI_30_KEYWORDS or isinstance(schema.get("type", ""), list):
        return False
    nested: list[Any] = [*schema.get("properties", {}).values()]
    nested += [schema[k] for k in ("items", "additionalProperties", "not") if k in schema]
    nested += [s for k in ("allOf", "anyOf", "oneOf") for s in schema.get(k, [])]
    return all(_is_openapi_30(sub) for sub in nested)
