"""Log hygiene: a filter that keeps job input, results and provider payloads out of log lines.

Job log lines carry `extra=lease.log_extra()` (job_id, kind, attempt, generation, worker). A
careless `extra={"input": ...}` anywhere would put private data into the log pipeline; this
filter replaces such fields with a marker instead of trusting every call site.
"""

from __future__ import annotations

import logging

FORBIDDEN_KEYS: frozenset[str] = frozenset(
    {"input", "result", "results", "payload", "body", "outcome", "kwargs", "corrected_input"}
)
REDACTED = "[redacted]"


class RedactPayloadFilter(logging.Filter):
    """Blank out record attributes named like payloads; never drops the line itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key in FORBIDDEN_KEYS.intersection(record.__dict__):
            setattr(record, key, REDACTED)
        return True
