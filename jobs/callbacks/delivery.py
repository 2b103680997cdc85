"""Sending completion callbacks: claim, send with no lock held, record.

Protocol of `callbacks_send_due` (what a crash at each step leaves behind):
  1. Claim: in one transaction, lock due pending deliveries with SKIP LOCKED, push their
     `next_attempt_at` out by the lease (the attempt's timeout plus a margin), stamp this
     claim's token, count the attempt and insert its attempt row (`sending`); commit. A
     crash after this leaves them claimed: once the lease lapses any sender takes them over
     (the old attempt row stays `sending`: that attempt's fate is unknown).
  2. Send them all at once, in threads that touch no database, each bounded by
     JOBS_CALLBACK_TIMEOUT (jobs.callbacks.transport). A crash here: the receiver may or may
     not have the request; the next sender sends the same webhook id.
  3. Record each outcome in one transaction fenced by (id, claim token, pending): delivered,
     failed, or pending again at its backoff; with its attempt row. A crash between 2 and 3
     (the failpoint `callbacks.after_send_before_record`): the receiver got the request and
     gets it again after the lease, with the same id. Zero rows matched: the lease lapsed and
     another sender took the delivery over; counted (stale_writes_rejected_total) and logged.
Two senders at once are safe: SKIP LOCKED plus the lease split the rows.

The delivery row is this effect's ledger entry (docs/architecture.md, "Completion
callbacks"): committed with the job's end before any call, keyed by a webhook id that never
changes, never sent again once delivered, its outcome recorded after each call.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from jobs.conf import jobs_settings
from jobs.counters import STALE_WRITES_REJECTED, counter_increment
from jobs.identity import lease_owner_token
from jobs.models import (
    AttemptOutcome,
    CallbackAttempt,
    CallbackDelivery,
    DeliveryStatus,
    Job,
)
from jobs.retry import backoff_delay
from jobs.selectors import job_owner_has_access
from outbox.failpoints import failpoint, failpoints_add

from .destination import host_allowed, url_host
from .payload import callback_body
from .signing import signed_headers, tenant_keys
from .transport import Answer, CallbackRequest, SendFailed, send_within_deadline

logger = logging.getLogger(__name__)

AFTER_SEND_BEFORE_RECORD = "callbacks.after_send_before_record"
failpoints_add({AFTER_SEND_BEFORE_RECORD})

LEASE_MARGIN_SECONDS = 5.0
# 408 Request Timeout and 429 Too Many Requests are worth another try; any other 4xx is the
# receiver's final word (a wrong URL, a refused signature): the delivery fails at once.
RETRIED_4XX = frozenset({408, 429})
_rng = random.SystemRandom()


@dataclass(frozen=True)
class Claimed:
    delivery: CallbackDelivery
    attempt: CallbackAttempt
    token: uuid.UUID


@dataclass(frozen=True)
class Verdict:
    """What one attempt's answer means for its delivery."""

    outcome: AttemptOutcome
    reason: str
    delay: float = 0.0


def delivery_decide(
    *,
    answer: Answer | SendFailed,
    attempt: int,
    ended_at: datetime,
    now: datetime,
    rng: random.Random,
) -> Verdict:
    """Delivered on a 2xx; failed on a final answer, a refused destination or a spent
    budget (attempts, or JOBS_CALLBACK_MAX_ELAPSED after the job's end); else a retry after
    a full-jitter backoff. Pure: the clock and the random source are passed in."""
    if isinstance(answer, Answer):
        code = answer.status_code
        if 200 <= code < 300:
            return Verdict(AttemptOutcome.DELIVERED, f"HTTP {code}")
        said = f"HTTP {code}"
        if 400 <= code < 500 and code not in RETRIED_4XX:
            return Verdict(AttemptOutcome.FAILED, f"{said}: the receiver refused it")
    else:
        said = answer.label
        if answer.refused:
            return Verdict(AttemptOutcome.FAILED, said)
    if attempt >= jobs_settings.CALLBACK_MAX_ATTEMPTS:
        return Verdict(AttemptOutcome.FAILED, f"attempt budget exhausted after {attempt}: {said}")
    delay = backoff_delay(
        attempt,
        base=jobs_settings.CALLBACK_BASE_DELAY,
        cap=jobs_settings.CALLBACK_MAX_DELAY,
        rng=rng,
    )
    if now + timedelta(seconds=delay) > ended_at + timedelta(
        seconds=jobs_settings.CALLBACK_MAX_ELAPSED
    ):
        return Verdict(AttemptOutcome.FAILED, f"elapsed budget exhausted: {said}")
    return Verdict(AttemptOutcome.RETRY, f"retry after {said}", delay)


def _lease_seconds() -> float:
    return float(jobs_settings.CALLBACK_TIMEOUT) + LEASE_MARGIN_SECONDS


def callbacks_claim_due(*, limit: int, sender: str) -> list[Claimed]:
    """Step 1: claim due pending deliveries and open their attempt rows; committed."""
    token = uuid.uuid4()
    now = timezone.now()
    with transaction.atomic():
        due = list(
            CallbackDelivery.objects.select_for_update(skip_locked=True)
            .filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
            .order_by("next_attempt_at", "id")[:limit]
        )
        if not due:
            return []
        lease_until = now + timedelta(seconds=_lease_seconds())
        for delivery in due:
            delivery.attempts += 1
            delivery.next_attempt_at = lease_until
            delivery.claimed_by = token
        CallbackDelivery.objects.bulk_update(due, ["attempts", "next_attempt_at", "claimed_by"])
        attempts = CallbackAttempt.objects.bulk_create(
            CallbackAttempt(
                delivery=delivery, number=delivery.attempts, started_at=now, sender=sender
            )
            for delivery in due
        )
    return [Claimed(d, a, token) for d, a in zip(due, attempts, strict=True)]


def _request(claimed: Claimed, job: Job | None) -> CallbackRequest | SendFailed:
    """The signed request of a claimed delivery, or why there is none to send."""
    delivery = claimed.delivery
    if job is None or not job.callback_url:
        return SendFailed("the job has no callback_url", refused=True)
    if not job_owner_has_access(job_id=job.pk):
        # Invariant 7: a result is released only while its owner may still see the job.
        return SendFailed("forbidden: the job's owner may no longer see it", refused=True)
    tenant_name = job.tenant.name if job.tenant is not None else None
    if not host_allowed(url_host(job.callback_url), tenant_name):
        # Re-checked at send time: the allow-list may have changed since the submit.
        return SendFailed(
            "refused destination: the host is not among the tenant's callback hosts "
            "(JOBS_CALLBACK_ALLOWED_HOSTS)",
            refused=True,
        )
    keys = tenant_keys(tenant_name)
    if not keys:
        return SendFailed("no callback secret for the job's tenant (JOBS_CALLBACK_SECRETS)")
    body = callback_body(job, event=delivery.event)
    return CallbackRequest(
        job.callback_url,
        headers=signed_headers(keys, delivery.webhook_id, body),
        body=body,
        timeout=float(jobs_settings.CALLBACK_TIMEOUT),
    )


def callbacks_send(claims: list[Claimed]) -> list[tuple[Answer | SendFailed, float]]:
    """Step 2: build and send every claimed delivery (no transaction is open): each one's
    answer and how long its attempt took."""
    jobs = Job.objects.select_related("tenant").in_bulk([c.delivery.job_id for c in claims])
    prepared = [_request(c, jobs.get(c.delivery.job_id)) for c in claims]
    requests = [p for p in prepared if isinstance(p, CallbackRequest)]
    answers = iter(send_within_deadline(requests))
    return [
        (next(answers), p.elapsed) if isinstance(p, CallbackRequest) else (p, 0.0) for p in prepared
    ]


def callback_record(
    claimed: Claimed, answer: Answer | SendFailed, *, duration: float, now: datetime | None = None
) -> Verdict | None:
    """Step 3: the attempt's outcome, fenced by the claim; None when the claim was lost."""
    delivery, attempt = claimed.delivery, claimed.attempt
    now = now or timezone.now()
    verdict = delivery_decide(
        answer=answer,
        attempt=delivery.attempts,
        ended_at=delivery.created_at,
        now=now,
        rng=_rng,
    )
    code = answer.status_code if isinstance(answer, Answer) else None
    error = "" if isinstance(answer, Answer) else answer.label[:500]
    fields: dict[str, object] = {"last_status_code": code, "last_error": verdict.reason[:500]}
    if verdict.outcome is AttemptOutcome.RETRY:
        fields["next_attempt_at"] = now + timedelta(seconds=verdict.delay)
        fields["claimed_by"] = None
    else:
        status = (
            DeliveryStatus.DELIVERED
            if verdict.outcome is AttemptOutcome.DELIVERED
            else DeliveryStatus.FAILED
        )
        fields.update(status=status, next_attempt_at=None, claimed_by=None, finished_at=now)
    with transaction.atomic():
        CallbackAttempt.objects.filter(pk=attempt.pk).update(
            outcome=verdict.outcome,
            status_code=code,
            error=error,
            duration_ms=max(int(duration * 1000), 0),
        )
        updated = CallbackDelivery.objects.filter(
            pk=delivery.pk, claimed_by=claimed.token, status=DeliveryStatus.PENDING
        ).update(**fields)
    if updated != 1:
        counter_increment(STALE_WRITES_REJECTED)
        logger.warning(
            "callback outcome not recorded: its claim lapsed and another sender took it",
            extra={"job_id": str(delivery.job_id), "webhook_id": delivery.webhook_id},
        )
        return None
    log = logger.info if verdict.outcome is not AttemptOutcome.FAILED else logger.warning
    log(
        "callback %s",
        verdict.outcome.value,
        extra={
            "job_id": str(delivery.job_id),
            "webhook_id": delivery.webhook_id,
            "attempt": delivery.attempts,
            "status_code": code,
            "reason": verdict.reason,
        },
    )
    return verdict


@dataclass
class SendReport:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


def callbacks_send_due(*, limit: int | None = None, budget: float | None = None) -> SendReport:
    """Send due deliveries in rounds (claim, send, record) until none is due or the time
    budget (default: the sender's interval, at least one round) is spent."""
    report = SendReport()
    limit = limit or int(jobs_settings.CALLBACK_BATCH)
    budget = float(jobs_settings.CALLBACK_INTERVAL) if budget is None else budget
    sender = lease_owner_token()
    started = time.monotonic()
    while True:
        claims = callbacks_claim_due(limit=limit, sender=sender)
        if not claims:
            return report
        report.claimed += len(claims)
        answers = callbacks_send(claims)
        failpoint(AFTER_SEND_BEFORE_RECORD)
        for claimed, (answer, duration) in zip(claims, answers, strict=True):
            verdict = callback_record(claimed, answer, duration=duration)
            if verdict is None:
                report.lost += 1
            elif verdict.outcome is AttemptOutcome.DELIVERED:
                report.delivered += 1
            elif verdict.outcome is AttemptOutcome.RETRY:
                report.retried += 1
            else:
                report.failed += 1
        if time.monotonic() - started >= budget:
            return report
