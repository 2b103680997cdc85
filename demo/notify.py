"""Client of the notification provider (NOTIFY_PROVIDER_URL): one POST per idempotency key."""

from __future__ import annotations

from typing import Any

import requests
from django.conf import settings

from jobs.exceptions import PermanentError, TransientError


def notify_send(*, idempotency_key: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST the notice; the provider dedupes on the Idempotency-Key header."""
    try:
        response = requests.post(
            settings.NOTIFY_PROVIDER_URL,
            json=body,
            headers={"Idempotency-Key": idempotency_key},
            timeout=settings.NOTIFY_PROVIDER_TIMEOUT,
        )
    except requests.Timeout as exc:
        raise TransientError("notification provider timed out (outcome unknown)") from exc
    except requests.ConnectionError as exc:
        raise TransientError("notification provider unreachable") from exc
    if response.status_code == 429 or response.status_code >= 500:
        raise TransientError(f"notification provider answered {response.status_code}")
    if response.status_code >= 400:
        raise PermanentError(f"notification provider refused the notice: {response.status_code}")
    data: dict[str, Any] = response.json()
    return {"notice_id": data.get("notice_id"), "replayed": bool(data.get("replayed"))}
