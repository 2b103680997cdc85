"""Signing callbacks the Standard Webhooks way (https://www.standardwebhooks.com/).

Each request carries `webhook-id` (the delivery's stable id), `webhook-timestamp` (Unix
seconds of this attempt) and `webhook-signature`: `v1,<base64 HMAC-SHA256>` of
`"{id}.{timestamp}.{body}"` under each of the tenant's secrets, space-separated (the newest
first), so a receiver that knows either secret of a rotation verifies it. A secret is
`whsec_` + base64 of 24 to 64 random bytes; the key is those bytes (as the Standard Webhooks
libraries take it). Secrets are never logged, shown or put in an error message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping

from jobs.conf import jobs_settings

SECRET_PREFIX = "whsec_"
KEY_BYTES = (24, 64)
TOLERANCE_SECONDS = 300  # what a receiver should accept of a timestamp's age (either way)
NO_TENANT = ""  # JOBS_CALLBACK_SECRETS' key for jobs without a tenant


class SignatureInvalid(Exception):
    """A request whose signature, timestamp or headers do not verify."""


def secret_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_...` secret (ValueError, naming no part of it, if malformed)."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a secret must be a string that starts with {SECRET_PREFIX!r}")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a secret must be whsec_ followed by base64") from None
    low, high = KEY_BYTES
    if not low <= len(key) <= high:
        raise ValueError(f"a secret must hold {low} to {high} bytes, not {len(key)}")
    return key


def secrets_problems(value: object) -> list[str]:
    """What is wrong with a JOBS_CALLBACK_SECRETS value (names tenants, never secrets)."""
    if not isinstance(value, Mapping):
        return ["must be a dict of tenant name -> secret or list of secrets"]
    problems = []
    for tenant, secrets in value.items():
        listed = [secrets] if isinstance(secrets, str) else secrets
        if not isinstance(tenant, str) or not isinstance(listed, list | tuple) or not listed:
            problems.append(f"{tenant!r}: give a secret or a non-empty list of secrets")
            continue
        for index, secret in enumerate(listed):
            try:
                secret_key(secret)
            except ValueError as exc:
                problems.append(f"{tenant!r}, secret {index + 1}: {exc}")
    return problems


def tenant_keys(tenant_name: str | None) -> list[bytes]:
    """The signing keys of a tenant's callbacks, newest first ([]: it has none)."""
    secrets = jobs_settings.CALLBACK_SECRETS.get(tenant_name or NO_TENANT)
    if not secrets:
        return []
    listed = [secrets] if isinstance(secrets, str) else list(secrets)
    return [secret_key(secret) for secret in listed]


def _sign(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    content = f"{webhook_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


def signature_header(keys: list[bytes], webhook_id: str, timestamp: int, body: bytes) -> str:
    """`webhook-signature`: one `v1,<signature>` per key, space-separated."""
    return " ".join(f"v1,{_sign(key, webhook_id, timestamp, body)}" for key in keys)


def signed_headers(
    keys: list[bytes], webhook_id: str, body: bytes, *, now: float | None = None
) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt."""
    timestamp = int(time.time() if now is None else now)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(keys, webhook_id, timestamp, body),
    }


def signature_verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float | None = None,
    tolerance: float = TOLERANCE_SECONDS,
) -> str:
    """A receiver's check (what docs/operations.md shows): returns the webhook id, or raises
    SignatureInvalid. Header names are case-insensitive."""
    lowered = {name.lower(): value for name, value in headers.items()}
    try:
        webhook_id = lowered["webhook-id"]
        timestamp = int(lowered["webhook-timestamp"])
        signatures = lowered["webhook-signature"].split()
    except (KeyError, ValueError):
        raise SignatureInvalid("missing or malformed webhook headers") from None
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        raise SignatureInvalid("timestamp outside the tolerance")
    expected = _sign(secret_key(secret), webhook_id, timestamp, body)
    for signature in signatures:
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(value, expected):
            return webhook_id
    raise SignatureInvalid("no signature matches")
