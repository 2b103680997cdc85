"""Schemathesis hooks of tests/integration/test_api_fuzz.py (SCHEMATHESIS_HOOKS): what the
schema cannot state, supplied as data.

`after` must name jobs that exist in the caller's tenant, which no JSON Schema can say: a
drawn list of well-formed ids (the schema's own pattern) becomes ids of jobs the test made
(env FUZZ_AFTER_IDS), one real id per distinct drawn id, so a schema-valid body stays
schema-valid and must be accepted. A list with any other item is left as drawn: such a case
tests the refusal. tests/integration/test_links.py checks the 400 for unknown ids.
"""

from __future__ import annotations

import os
import re
from typing import Any

import schemathesis

# jobs.api.fields.UUID_PATTERN (not imported: this process has no Django settings).
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


@schemathesis.hook
def map_body(ctx: Any, body: Any) -> Any:
    real = [v for v in os.environ.get("FUZZ_AFTER_IDS", "").split(",") if v]
    if not real or not isinstance(body, dict) or not isinstance(body.get("after"), list):
        return body
    drawn = body["after"]
    if not all(isinstance(v, str) and UUID.fullmatch(v) for v in drawn):
        return body
    seen: dict[str, int] = {}
    return {**body, "after": [real[seen.setdefault(v, len(seen)) % len(real)] for v in drawn]}
