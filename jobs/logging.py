"""Log lines of a job: which job they belong to, and never what it carries.

`JobContextFilter` adds the job's id, kind, attempt, generation and worker to every record
logged while the runtime runs one job (`job_log_context`, a context variable), by any logger:
the library's, the handler's, a client library's. A JSON formatter writes them as keys
(`job_id`, `kind`, `attempt`, `generation`, `worker`); a text format shows them with
`%(job_fields)s`, e.g. "... jobs.runtime job succeeded job=<id> kind=noop attempt=1
generation=1 worker=celery@host:5f0c2e:4242". Fields a call site passes in `extra=` win
(the heartbeat thread's lines carry `lease.log_extra()`: context variables stay in the thread
that set them).

`RedactPayloadFilter` keeps job input, results and provider payloads out: a careless
`extra={"input": ...}` anywhere is replaced with a marker instead of trusting every call site.

Neither is installed for you: add them to your handlers (docs/operations.md, "Logs").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

FORBIDDEN_KEYS: frozenset[str] = frozenset(
    {"input", "result", "results", "payload", "body", "outcome", "kwargs", "corrected_input"}
)
REDACTED = "[redacted]"

# Record attribute -> its name in the text suffix, in the order shown.
JOB_FIELDS: dict[str, str] = {
    "job_id": "job",
    "kind": "kind",
    "attempt": "attempt",
    "generation": "generation",
    "worker": "worker",
}
TEXT_ATTRIBUTE = "job_fields"

_current_job: ContextVar[dict[str, Any] | None] = ContextVar("jobs_log_context", default=None)


@contextmanager
def job_log_context(**fields: Any) -> Iterator[None]:
    """Every record logged inside (in this thread or task) carries these job fields; nested
    calls add to the outer ones. Only the names of JOB_FIELDS are kept: never a payload."""
    known = {name: value for name, value in fields.items() if name in JOB_FIELDS}
    outer = _current_job.get() or {}
    token = _current_job.set({**outer, **{k: v for k, v in known.items() if v is not None}})
    try:
        yield
    finally:
        _current_job.reset(token)


def current_job_fields() -> dict[str, Any]:
    """The job fields of the current context (empty outside a job)."""
    return dict(_current_job.get() or {})


class JobContextFilter(logging.Filter):
    """Add the current job's fields to each record, and their text form as `job_fields`
    (" job=<id> kind=<kind> ..."; empty outside a job). Never drops a line."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in (_current_job.get() or {}).items():
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        shown = [
            f"{label}={getattr(record, name)}"
            for name, label in JOB_FIELDS.items()
            if getattr(record, name, None) not in (None, "")
        ]
        # Only a record that names its job gets a suffix ("kind" alone is someone else's).
        named = getattr(record, "job_id", None) not in (None, "")
        setattr(record, TEXT_ATTRIBUTE, " " + " ".join(shown) if named and shown else "")
        return True


class RedactPayloadFilter(logging.Filter):
    """Blank out record attributes named like payloads; never drops the line itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key in FORBIDDEN_KEYS.intersection(record.__dict__):
            setattr(record, key, REDACTED)
        return True
