"""The OpenAPI document says exactly what the API accepts (test_api_fuzz.py holds it to that)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from drf_spectacular.validation import validate_schema

from demo.kinds import REPORT_SCHEMA
from jobs import registry
from jobs.api.fields import KIND_PATTERN, regex_for_schema

pytestmark = pytest.mark.django_db

API_OPERATIONS = {
    ("/api/jobs/", "get"),
    ("/api/jobs/", "post"),
    ("/api/jobs/{job_id}/", "get"),
    ("/api/jobs/{job_id}/result/", "get"),
    ("/api/jobs/{job_id}/cancel/", "post"),
    ("/api/objects/", "post"),
    ("/api/objects/{object_id}/", "get"),
}


@pytest.fixture
def document() -> dict[str, Any]:
    response = Client().get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    schema: dict[str, Any] = response.json()
    return schema


def parameter(document: dict[str, Any], path: str, method: str, name: str) -> dict[str, Any]:
    found = [p for p in document["paths"][path][method]["parameters"] if p["name"] == name]
    assert len(found) == 1, found
    return found[0]


def component(document: dict[str, Any], name: str) -> dict[str, Any]:
    schema: dict[str, Any] = document["components"]["schemas"][name]
    return schema


def test_schema_is_valid_openapi_30__with_the_kinds_input_schemas_inlined(
    document: dict[str, Any],
) -> None:
    assert document["openapi"].startswith("3.0")
    validate_schema(document)


def test_schema_list_kind__has_a_pattern_and_a_length(document: dict[str, Any]) -> None:
    schema = parameter(document, "/api/jobs/", "get", "kind")["schema"]
    assert schema["pattern"] == regex_for_schema(KIND_PATTERN)
    assert (schema["minLength"], schema["maxLength"]) == (1, 100)
    pattern = re.compile(schema["pattern"])
    assert all(pattern.search(kind) for kind in ("noop", "report.generate", "drill.read_input"))
    bad = ("", "a b", "a..b", ".a", "a.", "noop\x00", "task:app.tasks.send")
    assert not any(pattern.search(kind) for kind in bad)


def test_schema_submit_kind__one_alternative_per_registered_kind(
    document: dict[str, Any],
) -> None:
    submit = component(document, "JobSubmit")
    assert submit["additionalProperties"] is False
    assert submit["properties"]["kind"]["pattern"] == regex_for_schema(KIND_PATTERN)
    alternatives = {alt["title"]: alt for alt in submit["oneOf"]}
    submittable = {kind for kind in registry.kinds() if re.fullmatch(KIND_PATTERN, kind)}
    assert set(alternatives) == submittable
    for kind, alternative in alternatives.items():
        assert alternative["properties"]["kind"]["allOf"] == [{"type": "string", "enum": [kind]}]
    report = alternatives["report.generate"]
    # The kind's own schema, with the API's rule for strings added (no NUL, a pattern).
    assert _without_nul_patterns(report["properties"]["input"]) == REPORT_SCHEMA
    assert report["required"] == ["kind", "input"]  # {} lacks the required title
    assert "input" not in alternatives["noop"]["properties"]  # any object, as in the common part


def _without_nul_patterns(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_nul_patterns(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: _without_nul_patterns(value)
        for key, value in schema.items()
        if not (key == "pattern" and value == "^[^\\u0000]*$")
    }


def test_schema_submit_fields__strict_where_the_api_is(document: dict[str, Any]) -> None:
    properties = component(document, "JobSubmit")["properties"]
    assert properties["tenant"]["pattern"] == "^[-a-zA-Z0-9_]+$"
    for key in ("business_key", "serialization_key"):
        assert properties[key]["pattern"] == "^[^\\u0000]+$"  # PostgreSQL cannot store NUL
        assert properties[key]["maxLength"] == 200
    assert properties["input_ref"]["format"] == "uuid"
    assert properties["input_version"]["minimum"] == 1


def test_schema_pagination__integers_in_range_no_null(document: dict[str, Any]) -> None:
    page_size = parameter(document, "/api/jobs/", "get", "page_size")["schema"]
    assert page_size == {"type": "integer", "minimum": 1, "maximum": 200}
    page = parameter(document, "/api/jobs/", "get", "page")["schema"]
    assert page["type"] == "integer" and page["minimum"] == 1
    assert "nullable" not in page_size and "nullable" not in page


def test_schema_wait__a_number_no_smaller_than_0(document: dict[str, Any]) -> None:
    wait = parameter(document, "/api/jobs/{job_id}/", "get", "wait")
    assert wait["in"] == "query" and not wait.get("required", False)
    assert wait["schema"]["type"] == "number"
    assert wait["schema"]["minimum"] == 0


def test_schema_idempotency_key__1_to_200_visible_ascii(document: dict[str, Any]) -> None:
    key = parameter(document, "/api/jobs/", "post", "Idempotency-Key")
    assert key["in"] == "header" and not key.get("required", False)
    assert key["schema"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 200,
        "pattern": "^[!-~]+$",
    }


def test_schema_upload__a_binary_file_part_in_multipart(document: dict[str, Any]) -> None:
    body = document["paths"]["/api/objects/"]["post"]["requestBody"]
    assert set(body["content"]) == {"multipart/form-data"}
    assert body["content"]["multipart/form-data"]["schema"] == {
        "$ref": "#/components/schemas/ObjectUpload"
    }
    upload = component(document, "ObjectUpload")
    assert upload["properties"]["file"]["type"] == "string"
    assert upload["properties"]["file"]["format"] == "binary"
    assert upload["required"] == ["file"]
    assert upload["additionalProperties"] is False
    assert "nullable" not in upload["properties"]["tenant"]  # a form field cannot be null
    responses = document["paths"]["/api/objects/"]["post"]["responses"]
    assert "Location" in responses["201"]["headers"]


def test_schema_operations__each_has_its_own_description(document: dict[str, Any]) -> None:
    operations = {
        (path, method): operation
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
        if path != "/api/schema/"
    }
    assert set(operations) == API_OPERATIONS
    descriptions = [op["description"] for op in operations.values()]
    assert all(len(text) > 40 for text in descriptions), descriptions
    assert len(set(descriptions)) == len(descriptions), descriptions
    assert not any("oversized raw body" in text for text in descriptions)
    summaries = [op["summary"] for op in operations.values()]
    assert len(set(summaries)) == len(summaries)
