"""The nesting scan (jobs.nesting) and the published input schema's NUL rule (jobs.api.schema)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from jobs.api.fields import NO_NUL_SCHEMA_PATTERN
from jobs.api.schema import _strings_without_nul
from jobs.exceptions import ValidationFailed
from jobs.nesting import input_depth_check, json_depth, json_depth_over


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        (b"", 0),
        (b"5", 0),
        (b'"[[["', 0),
        (b"{}", 1),
        (b"[[], [[]], []]", 3),
        (b'{"a": "[{[{", "b": [1]}', 2),
        (b'{"a\\"[": []}', 2),  # an escaped quote does not end the string
        (b'["\\\\", [[]]]', 3),  # an escaped backslash does not escape the quote after it
        (b'["unterminated [[[[', 1),  # the rest is inside a string
        (b"]]][[", 0),  # a parser stops at the first closer, before nesting anything
        ('["caf\u00e9 [", [[]]]'.encode(), 3),
        (b"[" * 10_000, 10_000),
    ],
)
def test_json_depth__brackets_outside_strings(text: bytes, depth: int) -> None:
    assert json_depth(text) == depth


def test_json_depth__linear_on_inputs_that_would_make_a_regex_backtrack() -> None:
    # Each quote opens a string that never ends; a backtracking pattern rescans from each one.
    assert json_depth(b'"' + b'\\"' * 500_000) == 0
    assert json_depth(b'["' + b"\\" * 1_000_001) == 1


def test_json_depth_over__none_at_or_under_the_limit() -> None:
    assert json_depth_over(b"[[[]]]", 3) is None
    assert json_depth_over(b"[[[]]]", 2) == 3
    assert json_depth_over(b'["[[[[[[[[[["]', 2) is None  # counted only to rule it out


def test_input_depth_check__validation_failed_naming_the_setting(settings: Any) -> None:
    settings.JOBS_MAX_INPUT_DEPTH = 2
    assert input_depth_check(b'{"a":[]}') == b'{"a":[]}'
    with pytest.raises(ValidationFailed, match="3 levels deep, over JOBS_MAX_INPUT_DEPTH=2"):
        input_depth_check(b'{"a":[[]]}')
    with pytest.raises(ValidationFailed, match="too deeply to encode"):
        input_depth_check(None)


def test_published_input_schema__strings_refuse_nul_and_nothing_else() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 5},
            "code": {"type": "string", "pattern": "^[a-z]+$"},
            "colour": {"type": "string", "enum": ["red"]},
            "tags": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]}},
            "other": {"not": {"type": "string"}},
        },
        "additionalProperties": {"type": "string"},
    }
    published = _strings_without_nul(schema)
    properties = published["properties"]
    assert properties["name"] == {"type": "string", "maxLength": 5, "pattern": "^[^\\u0000]*$"}
    assert properties["code"] == {
        "allOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"pattern": NO_NUL_SCHEMA_PATTERN}]
    }
    assert properties["colour"] == schema["properties"]["colour"]  # pattern or not, no NUL
    assert properties["tags"]["items"]["anyOf"][0]["pattern"] == NO_NUL_SCHEMA_PATTERN
    assert properties["other"] == {"not": {"type": "string"}}  # a rule under `not` turns around
    assert published["additionalProperties"]["pattern"] == NO_NUL_SCHEMA_PATTERN
    assert schema["properties"]["name"] == {"type": "string", "maxLength": 5}  # not changed
    assert re.search(NO_NUL_SCHEMA_PATTERN, "line\nbreak") and re.search(NO_NUL_SCHEMA_PATTERN, "")
    assert not re.search(NO_NUL_SCHEMA_PATTERN, json.loads('"a\\u0000"'))
