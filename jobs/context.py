"""JobContext: what a handler may do, each step fenced by the lease it runs under."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import IO, Any
from uuid import UUID

from . import effects
from .artifacts import artifact_write_once
from .exceptions import Forbidden, LeaseLost
from .leases import Lease, lease_heartbeat, report_stale_write


class JobContext:
    """Handed to `fn(ctx, input)`; see DESIGN.md for the public contract."""

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self._lost = threading.Event()
        self._cancel = threading.Event()
        self._local_effects: list[tuple[str, Callable[[str], Any]]] = []

    # -- identity -------------------------------------------------------------------------
    @property
    def job_id(self) -> UUID:
        return self._lease.job_id

    @property
    def attempt(self) -> int:
        return self._lease.attempt

    @property
    def generation(self) -> int:
        return self._lease.generation

    @property
    def input_version(self) -> int:
        return self._lease.input_version

    @property
    def owner(self) -> int:
        return self._lease.owner_id

    @property
    def lease(self) -> Lease:
        return self._lease

    # -- cooperative signals ----------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        """True once cancellation was requested or the lease was lost: stop soon."""
        return self._cancel.is_set() or self._lost.is_set()

    @property
    def lease_lost(self) -> bool:
        return self._lost.is_set()

    def mark_lost(self) -> None:
        self._lost.set()

    def mark_cancel_requested(self) -> None:
        self._cancel.set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def _ensure_owned(self) -> None:
        if self._lost.is_set():
            raise LeaseLost(f"job {self.job_id}: generation {self.generation} lost its lease")

    def heartbeat(self) -> None:
        """Extend the lease now (long handlers between steps); raises LeaseLost when gone."""
        self._ensure_owned()
        result = lease_heartbeat(self._lease)
        if not result.alive:
            self._lost.set()
            report_stale_write(self._lease, "heartbeat")
            raise LeaseLost(f"job {self.job_id}: lease lost")
        if result.cancel_requested:
            self._cancel.set()

    # -- effects -----------------------------------------------------------------------------
    def effect(self, name: str, fn: Callable[[str], Any]) -> Any:
        """External effect through the ledger: `fn(idempotency_key)` at most once to success."""
        self._ensure_owned()
        return effects.effect_run(self._lease, name, fn)

    def local_effect(self, name: str, fn: Callable[[str], Any]) -> None:
        """Database effect run inside the completion transaction, ledgered with it."""
        self._ensure_owned()
        self._local_effects.append((name, fn))

    @property
    def local_effects(self) -> list[tuple[str, Callable[[str], Any]]]:
        return list(self._local_effects)

    def artifact(self, name: str, data: bytes) -> str:
        """Write-once artifact under a stable name; returns the stored name."""
        self._ensure_owned()
        return artifact_write_once(
            job_id=self.job_id, input_version=self.input_version, name=name, data=data
        )

    # -- authorization -----------------------------------------------------------------------
    def check_access(self) -> None:
        """Re-check that the owner may still use this job; raises Forbidden (permanent)."""
        from .selectors import job_owner_has_access

        if not job_owner_has_access(job_id=self.job_id):
            raise Forbidden("owner no longer has access to this job's tenant")

    def open_input(self) -> IO[bytes]:
        """Open the referenced upload after re-checking access."""
        from .selectors import job_input_object_open

        self._ensure_owned()
        self.check_access()
        return job_input_object_open(job_id=self.job_id)
