"""Completion callbacks without a database: which destinations pass, how a request is signed,
what an answer means for its delivery."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.callbacks.delivery import delivery_decide
from jobs.callbacks.destination import (
    API_URL_PATTERN,
    RefusedDestination,
    address_allowed,
    callback_url_check,
    destination_resolve,
)
from jobs.callbacks.signing import (
    SignatureInvalid,
    secret_key,
    secrets_problems,
    signature_verify,
    signed_headers,
)
from jobs.callbacks.transport import Answer, SendFailed
from jobs.exceptions import InvalidCallbackUrl
from jobs.models import AttemptOutcome

SECRET = "whsec_" + base64.b64encode(b"u" * 32).decode()
OTHER = "whsec_" + base64.b64encode(b"v" * 32).decode()
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)

REFUSED = [
    "127.0.0.1",
    "127.8.9.10",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "100.64.0.1",  # shared address space (carrier NAT)
    "169.254.169.254",  # cloud metadata
    "0.0.0.0",
    "224.0.0.1",
    "255.255.255.255",
    "240.0.0.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "ff02::1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
]


@pytest.mark.parametrize("address", REFUSED)
def test_a_private_or_special_address__refused_by_default(address: str) -> None:
    assert not address_allowed(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111"])
def test_a_public_address__allowed(address: str) -> None:
    assert address_allowed(ipaddress.ip_address(address))


def test_allowed_networks__open_exactly_those(settings: Any) -> None:
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    assert address_allowed(ipaddress.ip_address("127.0.0.1"))
    assert address_allowed(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert not address_allowed(ipaddress.ip_address("10.0.0.1"))
    assert not address_allowed(ipaddress.ip_address("::1"))


def test_localhost_resolves_to_loopback__refused_at_delivery() -> None:
    with pytest.raises(RefusedDestination, match=r"127\.0\.0\.1"):
        destination_resolve("localhost", 443)


def test_a_literal_address__checked_as_it_is(settings: Any) -> None:
    with pytest.raises(RefusedDestination):
        destination_resolve("169.254.169.254", 80)
    settings.JOBS_CALLBACK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    assert destination_resolve("127.0.0.1", 80) == "127.0.0.1"


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/",  # http needs JOBS_CALLBACK_ALLOW_HTTP
        "https://[::ffff:127.0.0.1]/",
        "https://user@example.com/",
        "https://example.com:0x1/",
        "javascript:alert(1)",
        "https://example.com/\n",
    ],
)
def test_callback_url_check__refuses(url: str) -> None:
    with pytest.raises(InvalidCallbackUrl):
        callback_url_check(url)


def test_callback_url_check__accepts_https_names_and_public_addresses() -> None:
    for url in ("https://hooks.example.com/a?b=c", "https://93.184.215.14:8443/x"):
        assert callback_url_check(url) == url


@given(st.text(max_size=300))
def test_callback_url_check__any_text_is_accepted_or_refused_never_an_error(text: str) -> None:
    for url in (text, "https://" + text):
        with contextlib.suppress(InvalidCallbackUrl):
            callback_url_check(url)


def test_signature__verifies_with_the_secret__not_with_another() -> None:
    body = b'{"type":"job.succeeded"}'
    headers = signed_headers([secret_key(SECRET)], "job-1-succeeded", body, now=NOW.timestamp())
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-signature"].startswith("v1,")
    assert signature_verify(SECRET, headers, body, now=NOW.timestamp()) == "job-1-succeeded"
    with pytest.raises(SignatureInvalid):
        signature_verify(OTHER, headers, body, now=NOW.timestamp())
    with pytest.raises(SignatureInvalid):
        signature_verify(SECRET, headers, body + b" ", now=NOW.timestamp())
    with pytest.raises(SignatureInvalid, match="timestamp"):
        signature_verify(SECRET, headers, body, now=NOW.timestamp() + 600)


def test_signature__of_a_rotation_verifies_with_either_secret() -> None:
    keys = [secret_key(SECRET), secret_key(OTHER)]
    headers = signed_headers(keys, "job-2-failed", b"{}", now=NOW.timestamp())
    assert len(headers["webhook-signature"].split()) == 2
    for secret in (SECRET, OTHER):
        assert signature_verify(secret, headers, b"{}", now=NOW.timestamp())


def test_secrets_problems__name_the_tenant_never_the_secret() -> None:
    leaked = "whsec_c2hvcnQ="  # base64 of 5 bytes: too short
    problems = secrets_problems({"acme": leaked, "": [SECRET], "beta": "plain-text", "x": []})
    assert len(problems) == 3
    assert not any(leaked in p or "plain-text" in p for p in problems)
    assert secrets_problems({"acme": [SECRET, OTHER]}) == []
    assert secrets_problems("whsec_x") != []


def _decide(answer: Answer | SendFailed, *, attempt: int = 1, ended: datetime = NOW) -> Any:
    return delivery_decide(
        answer=answer, attempt=attempt, ended_at=ended, now=NOW, rng=random.Random(7)
    )


@pytest.mark.parametrize("code", [200, 201, 204, 299])
def test_a_2xx__delivered(code: int) -> None:
    assert _decide(Answer(code, "1.1.1.1")).outcome is AttemptOutcome.DELIVERED


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 422])
def test_a_4xx__fails_at_once(code: int) -> None:
    assert _decide(Answer(code, "1.1.1.1")).outcome is AttemptOutcome.FAILED


@pytest.mark.parametrize("code", [301, 408, 429, 500, 502, 503])
def test_408_429_5xx_and_redirects__retried_with_a_bounded_backoff(code: int) -> None:
    verdict = _decide(Answer(code, "1.1.1.1"), attempt=3)
    assert verdict.outcome is AttemptOutcome.RETRY
    assert 0 <= verdict.delay <= 5.0 * 2**2


def test_no_answer__retried__a_refused_destination_fails() -> None:
    assert _decide(SendFailed("timed out")).outcome is AttemptOutcome.RETRY
    refused = SendFailed("refused destination: x", refused=True)
    assert _decide(refused).outcome is AttemptOutcome.FAILED


def test_the_budgets__attempts_and_time_since_the_job_ended(settings: Any) -> None:
    settings.JOBS_CALLBACK_MAX_ATTEMPTS = 4
    assert _decide(Answer(500, "x"), attempt=4).outcome is AttemptOutcome.FAILED
    long_ago = NOW - timedelta(seconds=86400)
    verdict = _decide(Answer(500, "x"), attempt=2, ended=long_ago)
    assert verdict.outcome is AttemptOutcome.FAILED and "elapsed" in verdict.reason


def test_the_operations_docs_verification_snippet__verifies_a_real_request() -> None:
    from tests.harness import ROOT

    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc.split("### Completion callbacks", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "operations.md", "exec"), namespace)
    body = b'{"data":{}}'
    headers = signed_headers([secret_key(SECRET), secret_key(OTHER)], "job-9-cancelled", body)
    assert namespace["verify"](OTHER, headers, body) == "job-9-cancelled"
    with pytest.raises(ValueError):
        namespace["verify"](SECRET, headers, body + b"x")


@given(st.from_regex(API_URL_PATTERN))
def test_every_url_the_api_schema_allows__passes_the_check(url: str) -> None:
    """The API's pattern is no looser than the check: a schema-valid URL is not a 400."""
    from django.test import override_settings

    with override_settings(JOBS_CALLBACK_ALLOW_HTTP=True):
        assert callback_url_check(url) == url
