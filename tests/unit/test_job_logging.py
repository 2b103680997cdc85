"""jobs.logging: the job's fields on every line logged while it runs, never its payload."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Iterator

import pytest
from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from jobs.logging import (
    REDACTED,
    JobContextFilter,
    RedactPayloadFilter,
    current_job_fields,
    job_log_context,
)
from jobsite.settings import LOGGING

Captured = tuple[logging.Logger, io.StringIO, io.StringIO]
TEXT_FORMAT = LOGGING["formatters"]["text"]["format"]  # type: ignore[index]


@pytest.fixture
def captured() -> Iterator[Captured]:
    """A logger with a text and a JSON handler configured as the example project's."""
    text, json_out = io.StringIO(), io.StringIO()
    text_handler = logging.StreamHandler(text)
    text_handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    json_handler = logging.StreamHandler(json_out)
    json_handler.setFormatter(
        JsonFormatter(
            "%(levelname)s %(name)s %(message)s", reserved_attrs=[*RESERVED_ATTRS, "job_fields"]
        )
    )
    logger = logging.getLogger("tests.job_logging")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    for handler in (text_handler, json_handler):
        handler.addFilter(JobContextFilter())
        handler.addFilter(RedactPayloadFilter())
        logger.addHandler(handler)
    yield logger, text, json_out
    for handler in (text_handler, json_handler):
        logger.removeHandler(handler)


def test_line_inside_a_job__carries_its_fields_in_text_and_json(captured: Captured) -> None:
    import json

    logger, text, json_out = captured
    with job_log_context(job_id="j-1", kind="noop", attempt=2, generation=3, worker="w@h:ab:9"):
        logger.info("job succeeded")

    assert text.getvalue().endswith(
        "INFO tests.job_logging job succeeded job=j-1 kind=noop attempt=2 generation=3 "
        "worker=w@h:ab:9\n"
    )
    line = json.loads(json_out.getvalue())
    assert line == {
        "levelname": "INFO",
        "name": "tests.job_logging",
        "message": "job succeeded",
        "job_id": "j-1",
        "kind": "noop",
        "attempt": 2,
        "generation": 3,
        "worker": "w@h:ab:9",
    }


def test_line_outside_a_job__has_no_suffix_and_no_keys(captured: Captured) -> None:
    logger, text, json_out = captured
    logger.info("relay tick")

    assert text.getvalue().endswith("INFO tests.job_logging relay tick\n")
    assert "job_id" not in json_out.getvalue()


def test_fields_passed_in_extra__win_over_the_context(captured: Captured) -> None:
    logger, text, _ = captured
    with job_log_context(job_id="outer", kind="noop"):
        logger.warning("stale write", extra={"job_id": "other", "generation": 7})

    assert text.getvalue().rstrip().endswith("stale write job=other kind=noop generation=7")


def test_nested_context__adds_to_the_outer_and_restores_it() -> None:
    with job_log_context(job_id="j-1"):
        with job_log_context(kind="noop", attempt=1, generation=1):
            assert current_job_fields() == {
                "job_id": "j-1",
                "kind": "noop",
                "attempt": 1,
                "generation": 1,
            }
        assert current_job_fields() == {"job_id": "j-1"}
    assert current_job_fields() == {}


def test_context_keeps_job_fields_only__never_a_payload() -> None:
    with job_log_context(job_id="j-1", input={"secret": 1}, result={"x": 2}):
        assert current_job_fields() == {"job_id": "j-1"}


def test_context_stays_in_its_thread__another_thread_sees_none() -> None:
    seen: list[dict[str, object]] = []
    with job_log_context(job_id="j-1"):
        thread = threading.Thread(target=lambda: seen.append(current_job_fields()))
        thread.start()
        thread.join()
    assert seen == [{}]


def test_payload_in_extra__redacted_inside_a_job_too(captured: Captured) -> None:
    logger, text, json_out = captured
    with job_log_context(job_id="j-1"):
        logger.info("oops", extra={"input": {"secret": "private-7"}})

    assert "private-7" not in text.getvalue() + json_out.getvalue()
    assert REDACTED in json_out.getvalue()
