"""Built-in kinds: a no-op for benchmarks and the seed's report job (job 84).

The drills (kinds that crash their worker on purpose) are not here: they register only when
asked for, through JOBS_HANDLER_MODULES=demo.drill_kinds (demo.apps refuses them in production).
"""

from __future__ import annotations

import json
from typing import Any

from jobs.context import JobContext
from jobs.registry import handler

from .notify import notify_send


@handler("noop", max_attempts=3, lease_seconds=30)
def noop(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True}


REPORT_SCHEMA = {
    # Bounded so that the largest valid input fits JOBS_MAX_INPUT_BYTES (64 KiB by default)
    # even with every character escaped (12 bytes for one outside the BMP): at most about
    # 61 KB, and the request around it fits the API's body limit. 10,000 rows of anything
    # were allowed here, and a 413 came long before.
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 200},
        "rows": {
            "type": "array",
            "maxItems": 50,
            "items": {
                "type": "array",
                "maxItems": 8,
                "items": {
                    "anyOf": [
                        {"type": "string", "maxLength": 12},
                        {"type": "number", "minimum": -(10**15), "maximum": 10**15},
                    ]
                },
            },
        },
        "reviewer": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
    },
    "required": ["title"],
    "additionalProperties": False,
}


def render_report(input: dict[str, Any]) -> bytes:
    """Deterministic for one input: a retry must produce byte-identical artifacts."""
    lines = [f"# {input['title']}", ""]
    for row in input.get("rows", []):
        lines.append(" | ".join(str(cell) for cell in row))
    lines.append("")
    lines.append(f"rows: {len(input.get('rows', []))}")
    return "\n".join(lines).encode()


@handler(
    "report.generate",
    max_attempts=5,
    max_elapsed=3600,
    lease_seconds=30,
    base_delay=0.5,
    max_delay=30,
    responsible="reports-team",
    input_schema=REPORT_SCHEMA,
)
def report_generate(ctx: JobContext, input: dict[str, Any]) -> dict[str, Any]:
    """Seed 004's job 84: store the report under a stable name, then send one notice."""
    ctx.check_access()
    artifact = ctx.artifact("report.md", render_report(input))
    notice = ctx.effect(
        "completion_notice",
        lambda key: notify_send(
            idempotency_key=key,
            body={
                "job_id": str(ctx.job_id),
                "input_version": ctx.input_version,
                "artifact": artifact,
                "reviewer": input.get("reviewer"),
            },
        ),
    )
    return {
        "artifact": artifact,
        "notice": notice,
        "summary": json.dumps({"title": input["title"]}),
    }
