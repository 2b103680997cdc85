"""The effect ledger: at most one business effect per (job, input version, effect name).

External effect protocol (`effect_run`):
  1. In a transaction fenced by the job's generation, find or create the ledger row. If it is
     `applied`, return its stored outcome: the call is never made again. Otherwise stamp our
     generation, count the call and commit the row as `pending` *before* calling out. A crash
     after this commit leaves a pending row; the next attempt calls with the same key.
  2. Call `fn(idempotency_key)` outside any transaction. The provider dedupes on the key.
  3. Record `applied` with the outcome, fenced by the row's generation. A crash between 2 and 3
     makes the next attempt call again with the same key; the provider answers with the
     first result. On a timeout or connection error the row becomes `uncertain`; on another
     error `failed`; either way a retry reuses the key.
Local effects (database writes of the caller) run inside the completion transaction instead,
so the ledger row and the business change commit together or not at all.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from .counters import DUPLICATE_EFFECTS, EFFECTS_REUSED, counter_increment
from .exceptions import LeaseLost
from .leases import Lease, fenced, fenced_transaction, report_stale_write
from .models import EffectLedgerEntry, EffectState
from .retry import Category, classify

logger = logging.getLogger(__name__)


def effect_idempotency_key(*, job_id: object, input_version: int, name: str) -> str:
    """Stable across attempts, workers and generations: derived only from the effect's identity."""
    digest = hashlib.sha256(f"{job_id}:{input_version}:{name}".encode()).hexdigest()[:32]
    return f"job-{job_id}-v{input_version}-{name}-{digest[:12]}"


def _lock_entry(lease: Lease, name: str, *, local: bool) -> EffectLedgerEntry:
    """Inside a fenced transaction: the ledger row for this effect, created if new."""
    key = effect_idempotency_key(job_id=lease.job_id, input_version=lease.input_version, name=name)
    entry = (
        EffectLedgerEntry.objects.select_for_update()
        .filter(job_id=lease.job_id, input_version=lease.input_version, name=name)
        .first()
    )
    if entry is not None:
        return entry
    try:
        with transaction.atomic():
            return EffectLedgerEntry.objects.create(
                job_id=lease.job_id,
                input_version=lease.input_version,
                name=name,
                idempotency_key=key,
                local=local,
                state=EffectState.PENDING,
                generation=lease.generation,
            )
    except IntegrityError:
        return EffectLedgerEntry.objects.select_for_update().get(
            job_id=lease.job_id, input_version=lease.input_version, name=name
        )


def _require_lease(lease: Lease) -> None:
    if not fenced(lease).select_for_update().exists():
        raise LeaseLost(f"job {lease.job_id}: generation {lease.generation} lost its lease")


def effect_begin(lease: Lease, name: str) -> EffectLedgerEntry:
    """Step 1: returns the row; `applied` means reuse, otherwise it is committed pending."""
    with fenced_transaction(lease, f"effect {name}: begin"):
        _require_lease(lease)
        entry = _lock_entry(lease, name, local=False)
        if entry.state == EffectState.APPLIED:
            return entry
        entry.state = EffectState.PENDING
        entry.generation = lease.generation
        entry.calls += 1
        entry.save(update_fields=["state", "generation", "calls", "updated_at"])
        return entry


def effect_record(
    lease: Lease, entry: EffectLedgerEntry, *, state: EffectState, outcome: Any, error: str = ""
) -> None:
    """Step 3: record the outcome, fenced by the ledger row's generation."""
    now = timezone.now()
    query = EffectLedgerEntry.objects.filter(pk=entry.pk, generation=lease.generation)
    updated = query.exclude(state=EffectState.APPLIED).update(
        state=state,
        outcome=outcome,
        last_error=error[:1000],
        applied_at=now if state == EffectState.APPLIED else None,
        updated_at=now,
    )
    if updated == 1:
        return
    if state == EffectState.APPLIED and query.filter(state=EffectState.APPLIED).exists():
        # The same generation applied it twice: must never happen; make it visible.
        counter_increment(DUPLICATE_EFFECTS)
        logger.error("effect applied twice", extra={**lease.log_extra(), "effect": entry.name})
        return
    report_stale_write(lease, f"effect {entry.name}: record")
    raise LeaseLost(f"job {lease.job_id}: effect {entry.name} taken over by a newer generation")


def effect_run(lease: Lease, name: str, fn: Callable[[str], Any]) -> Any:
    """Call `fn(idempotency_key)` at most once to success; later attempts get the stored outcome."""
    entry = effect_begin(lease, name)
    if entry.state == EffectState.APPLIED:
        counter_increment(EFFECTS_REUSED)
        return entry.outcome
    try:
        outcome = fn(entry.idempotency_key)
    except Exception as exc:
        category, label = classify(exc)
        state = EffectState.UNCERTAIN if category is Category.TRANSIENT else EffectState.FAILED
        effect_record(lease, entry, state=state, outcome=None, error=f"{label}")
        raise
    effect_record(lease, entry, state=EffectState.APPLIED, outcome=outcome)
    return outcome


def effect_apply_local(lease: Lease, name: str, fn: Callable[[str], Any]) -> Any:
    """Inside the completion transaction: run a database effect once and ledger it as applied."""
    entry = _lock_entry(lease, name, local=True)
    if entry.state == EffectState.APPLIED:
        counter_increment(EFFECTS_REUSED)
        return entry.outcome
    outcome = fn(entry.idempotency_key)
    entry.state = EffectState.APPLIED
    entry.generation = lease.generation
    entry.calls += 1
    entry.outcome = outcome
    entry.applied_at = timezone.now()
    entry.save()
    return outcome
