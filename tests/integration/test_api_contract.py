"""Where schemathesis found the schema and the API disagreeing: each refusal is in the schema,
and what the schema allows is accepted."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from demo.kinds import REPORT_SCHEMA
from jobs import registry
from jobs.conf import jobs_settings
from jobs.models import Job, StoredObject, Tenant
from jobs.submission import _canonical
from tests.integration.api_helpers import error_code, submit, token_client

pytestmark = pytest.mark.django_db

# One character outside the BMP: `\ud83d\ude00` once escaped, 12 bytes, the most any takes.
WIDEST = "\U0001f600"
# The longest a float prints (canonical JSON uses repr): 17 digits, a sign, an exponent.
LONGEST_FLOAT = -1.2345678901234567e-300


def published_submit(kind: str) -> dict[str, Any]:
    document = Client().get("/api/schema/", {"format": "json"}).json()
    alternatives = document["components"]["schemas"]["JobSubmit"]["oneOf"]
    (found,) = [alt for alt in alternatives if alt["title"] == kind]
    return dict(found)


# --- a form field given twice ------------------------------------------------------------------


@pytest.mark.parametrize("field", ["tenant", "file"])
def test_upload_is_400_naming_the_field__a_part_given_twice(alice: Any, field: str) -> None:
    Tenant.objects.create(name="other").members.add(alice)
    parts: dict[str, Any] = {"file": SimpleUploadedFile("a.csv", b"a"), "tenant": "acme"}
    if field == "tenant":
        parts["tenant"] = ["acme", "other"]
    else:
        parts["file"] = [SimpleUploadedFile("a.csv", b"a"), SimpleUploadedFile("b.csv", b"b")]
    response = token_client(alice).post("/api/objects/", parts)
    assert response.status_code == 400, response.content
    assert error_code(response) == "invalid"
    assert set(response.json()["error"]["details"]) == {field}
    assert StoredObject.objects.count() == 0


def test_submit_is_400_naming_the_field__tenant_as_a_list(alice: Any) -> None:
    response = submit(token_client(alice), {"kind": "noop", "tenant": ["acme"]})
    assert response.status_code == 400
    assert set(response.json()["error"]["details"]) == {"tenant"}
    assert Job.objects.count() == 0


# --- NUL in input strings ----------------------------------------------------------------------


def _strings(schema: Any, path: str = "input") -> list[tuple[str, dict[str, Any]]]:
    """Every string schema of a published input schema, with where it is."""
    if not isinstance(schema, dict):
        return []
    found = [(path, schema)] if schema.get("type") == "string" else []
    for name, sub in schema.get("properties", {}).items():
        found += _strings(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        found += _strings(schema.get(key), f"{path}[]")
    for key in ("allOf", "anyOf", "oneOf"):
        for n, sub in enumerate(schema.get(key, [])):
            found += _strings(sub, f"{path}|{n}")
    return found


def _pattern_allows(schema: dict[str, Any], value: str) -> bool:
    patterns = [schema.get("pattern")] + [s.get("pattern") for s in schema.get("allOf", [])]
    return all(re.search(p, value) for p in patterns if p)


def test_schema_says_input_strings_cannot_hold_nul__where_the_api_refuses_them(
    alice: Any,
) -> None:
    published = published_submit("report.generate")["properties"]["input"]
    strings = _strings(published)
    assert {path for path, _ in strings} >= {"input.title", "input.rows[][]|0"}
    for path, schema in strings:
        assert not _pattern_allows(schema, "a\x00b"), (path, schema)
        assert _pattern_allows(schema, "a"), (path, schema)
    # The schema says no more than the API does: a NUL-free title is accepted, one with NUL not.
    client = token_client(alice)
    assert submit(client, {"kind": "report.generate", "input": {"title": "a"}}).status_code == 202
    refused = submit(client, {"kind": "report.generate", "input": {"title": "a\x00b"}})
    assert refused.status_code == 400
    assert Job.objects.count() == 1


def test_schema_says_free_form_input_cannot_hold_nul_or_nest_deeply() -> None:
    document = Client().get("/api/schema/", {"format": "json"}).json()
    described = document["components"]["schemas"]["JobSubmit"]["properties"]["input"]
    assert "U+0000" in described["description"], described
    assert "JOBS_MAX_INPUT_DEPTH" in described["description"], described


# --- the report kind's bounds fit the body limit -----------------------------------------------


def largest(schema: dict[str, Any], path: str = "input") -> Any:
    """The valid instance of `schema` whose canonical JSON is longest (every bound at its
    maximum, every character the widest); an unbounded schema fails the test."""
    if "anyOf" in schema:
        return max((largest(s, path) for s in schema["anyOf"]), key=lambda v: len(_canonical(v)))
    kind = schema.get("type")
    if kind == "object":
        assert schema.get("additionalProperties") is False, f"{path}: other properties allowed"
        return {name: largest(sub, f"{path}.{name}") for name, sub in schema["properties"].items()}
    if kind == "array":
        assert "maxItems" in schema and "items" in schema, f"{path}: unbounded array"
        return [largest(schema["items"], f"{path}[]")] * schema["maxItems"]
    if kind == "string":
        assert "maxLength" in schema, f"{path}: unbounded string"
        return WIDEST * schema["maxLength"]
    assert kind in {"integer", "number"}, f"{path}: any JSON value allowed"
    assert "minimum" in schema and "maximum" in schema, f"{path}: unbounded number"
    low, high = schema["minimum"], schema["maximum"]
    candidates = [low, high] + ([LONGEST_FLOAT] if kind == "number" and low <= 0 <= high else [])
    return max(candidates, key=lambda v: len(_canonical(v)))


def test_largest_valid_report_input_fits_the_size_limits__accepted_over_http(
    alice: Any,
) -> None:
    spec = registry.kind_latest("report.generate")
    assert spec.input_schema == REPORT_SCHEMA
    biggest = largest(REPORT_SCHEMA)
    spec.validate(biggest)  # the schema calls it valid
    assert len(_canonical(biggest).encode()) <= jobs_settings.MAX_INPUT_BYTES
    tenant = "t" * 100
    Tenant.objects.create(name=tenant).members.add(alice)
    body = {
        "kind": "report.generate",
        "input": biggest,
        "business_key": WIDEST * 200,
        "serialization_key": WIDEST * 200,
        "tenant": tenant,
        "input_version": 2**31 - 1,
    }
    raw = json.dumps(body)  # as a client sends it: ASCII escapes and ", " separators
    response = token_client(alice).post("/api/jobs/", data=raw, content_type="application/json")
    assert response.status_code == 202, response.content[:500]
    assert Job.objects.get().input == biggest
