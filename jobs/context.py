"""JobContext: what a handler may do, each step fenced by the lease it runs under."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any
from uuid import UUID

from django.core.exceptions import ValidationError

from . import effects, follow_ups, links
from .artifacts import artifact_write_once
from .exceptions import Forbidden, LeaseLost
from .leases import Lease, lease_heartbeat, report_stale_write
from .progress import Progress, ProgressThrottle, job_progress_write_if_leased, progress_value

if TYPE_CHECKING:
    from datetime import datetime

    from django.contrib.auth.models import User
    from django.db.models import Model, QuerySet

    from .models import Tenant
    from .rows import CheckedSubmit

logger = logging.getLogger(__name__)

# The share of a lease a worker keeps as its margin: once less than this is left since the
# last extension it saw answered (by its own monotonic clock), the lease is in doubt.
LEASE_DOUBT_FRACTION = 0.1


class JobContext:
    """Handed to `fn(ctx, input)`; see DESIGN.md for the public contract."""

    def __init__(self, lease: Lease, *, extended_at: float | None = None) -> None:
        """`extended_at`: the monotonic time the claim was sent (the lease runs from then at
        the latest); by default now, one round trip later than the truth."""
        self._lease = lease
        started = time.monotonic() if extended_at is None else extended_at
        self._valid_until = started + lease.lease_seconds
        self._doubt_seen = False
        self._lost = threading.Event()
        self._cancel = threading.Event()
        self._local_effects: list[tuple[str, Callable[[str], Any]]] = []
        self._progress: ProgressThrottle | None = None  # made by the first report
        self._follow_ups: list[CheckedSubmit] = []  # ctx.submit's, written with the success
        self._scope: tuple[User, Tenant | None] | None = None  # the job's, loaded once

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
    def tenant_id(self) -> int | None:
        """The job's tenant; None for a personal job of `owner`. From the lease: no query."""
        return self._lease.tenant_id

    @property
    def priority(self) -> int:
        """The job's priority (-100..100), e.g. for its follow-ups. From the lease: no query."""
        return self._lease.priority

    @property
    def lease(self) -> Lease:
        return self._lease

    # -- cooperative signals ----------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        """True once cancellation was requested, the lease was lost, or no heartbeat has
        answered for long enough that the lease may expire elsewhere: stop soon."""
        if self._cancel.is_set() or self._lost.is_set():
            return True
        if self.lease_in_doubt:
            self._doubt_seen = True  # the handler may stop on it: its result is not trusted
            return True
        return False

    @property
    def doubt_seen(self) -> bool:
        """The handler was told to stop because the lease was in doubt: whatever it returns
        is not this attempt's outcome (jobs.runtime.judge discards it)."""
        return self._doubt_seen

    @property
    def lease_lost(self) -> bool:
        """The database said the lease is gone (a fenced write matched no row)."""
        return self._lost.is_set()

    @property
    def lease_in_doubt(self) -> bool:
        """No extension answered for so long (heartbeats cannot reach the database) that the
        lease may expire within the margin: start no external effect. A later heartbeat that
        answers clears it; one that finds the lease gone makes it lost."""
        margin = self._lease.lease_seconds * LEASE_DOUBT_FRACTION
        return time.monotonic() >= self._valid_until - margin

    def lease_left(self) -> float:
        """Seconds the lease surely holds by this worker's clock (negative: past it)."""
        return self._valid_until - time.monotonic()

    def mark_lost(self) -> None:
        self._lost.set()

    def mark_extended(self, sent_at: float) -> None:
        """A heartbeat sent at `sent_at` (monotonic) extended the lease."""
        self._valid_until = max(self._valid_until, sent_at + self._lease.lease_seconds)

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
        sent_at = time.monotonic()
        result = lease_heartbeat(self._lease)
        if result.alive:
            self.mark_extended(sent_at)
        if not result.alive:
            self._lost.set()
            report_stale_write(self._lease, "heartbeat")
            raise LeaseLost(f"job {self.job_id}: lease lost")
        if result.cancel_requested:
            self._cancel.set()

    # -- running the handler and its progress -----------------------------------------------
    def run(self, fn: Callable[[JobContext, Any], Any], job_input: Any) -> Any:
        """`fn(self, job_input)`, then the last throttled progress written before the outcome
        (jobs.runtime.call_handler, both paths). After an error it is written if it can be:
        the error stays the attempt's outcome."""
        try:
            result = fn(self, job_input)
        except Exception:
            self._progress_flush_after_error()
            raise
        self.progress_flush()
        return result

    def progress(self, done: int, total: int | None = None, message: str = "") -> None:
        """Report `done` of `total` units (None: unknown) and a short message, shown in the
        API, admin and /ops/. Throttled (jobs.progress): cheap to call in a tight loop.
        TypeError/ValueError for bad arguments; LeaseLost once the lease is gone."""
        value = progress_value(done, total, message)
        self._ensure_owned()
        if self._progress is None:
            self._progress = ProgressThrottle(self._progress_write)
        self._progress.report(value)

    def progress_flush(self) -> None:
        """Write the pending progress now, if any (no round trip when there is none)."""
        if self._progress is not None and self._progress.pending is not None:
            self._ensure_owned()
            self._progress.flush()

    def _progress_flush_after_error(self) -> None:
        try:
            self.progress_flush()
        except LeaseLost:
            pass  # counted and logged; the run is stale (jobs.runtime.judge)
        except Exception:
            logger.warning("progress not written after the handler's error", exc_info=True)

    def _progress_write(self, value: Progress) -> None:
        try:
            job_progress_write_if_leased(self._lease, value)
        except LeaseLost:
            self._lost.set()
            report_stale_write(self._lease, "progress")
            raise

    # -- effects -----------------------------------------------------------------------------
    def effect(self, name: str, fn: Callable[[str], Any]) -> Any:
        """External effect through the ledger: `fn(idempotency_key)` at most once to success.
        Not started while the lease is in doubt: LeaseLost, and the attempt ends unwritten."""
        self._ensure_owned()
        if self.lease_in_doubt:
            raise LeaseLost(
                f"job {self.job_id}: no heartbeat answered, the lease may expire in "
                f"{max(self.lease_left(), 0.0):.1f}s; effect {name!r} not started"
            )
        return effects.effect_run(self._lease, name, fn)

    def local_effect(self, name: str, fn: Callable[[str], Any]) -> None:
        """Database effect run inside the completion transaction, ledgered with it."""
        self._ensure_owned()
        self._local_effects.append((name, fn))

    @property
    def local_effects(self) -> list[tuple[str, Callable[[str], Any]]]:
        return list(self._local_effects)

    # -- follow-ups (jobs.follow_ups) and fan-in (jobs.links) ----------------------------------
    def submit(
        self,
        kind: str,
        input: dict[str, Any] | None = None,
        *,
        owner: User | None = None,
        tenant: Tenant | object | None = follow_ups.INHERIT,
        business_key: str | None = None,
        input_version: int = 1,
        idempotency_key: str | None = None,
        serialization_key: str | None = None,
        run_after: datetime | None = None,
        priority: int | None = None,
        after: list[UUID] | tuple[UUID, ...] = (),
        after_failure: str = "run",
    ) -> UUID:
        """Ask for a follow-up job: written in the transaction that records this job's
        success, with `parent` = this job; nothing if the success does not commit (an error,
        a retry, a lost lease). Checked now as `jobs.submit` checks a request (kind, input,
        priority, `after`): an error is this handler's. Owner and tenant are this job's
        unless given. `after` may name earlier follow-ups of this context. Returns the id
        the job will have."""
        self._ensure_owned()
        checked = follow_ups.follow_up_check(
            parent_id=self.job_id,
            parent_scope=self.job_scope(),
            siblings={s.request.job_id for s in self._follow_ups if s.request.job_id},
            kind=kind,
            input={} if input is None else input,
            owner=owner,
            tenant=tenant,
            business_key=business_key,
            input_version=input_version,
            idempotency_key=idempotency_key,
            serialization_key=serialization_key,
            run_after=run_after,
            priority=priority,
            after=after,
            after_failure=after_failure,
        )
        self._follow_ups.append(checked)
        job_id = checked.request.job_id
        assert job_id is not None
        return job_id

    @property
    def follow_ups(self) -> list[CheckedSubmit]:
        return list(self._follow_ups)

    def job_scope(self) -> tuple[User, Tenant | None]:
        """This job's owner and tenant as rows (two queries, once)."""
        if self._scope is None:
            self._scope = follow_ups.scope_rows(owner_id=self.owner, tenant_id=self.tenant_id)
        return self._scope

    def dependencies(self) -> list[links.Dependency]:
        """The outcomes of the jobs this one waited for (`after=`): id, kind, state, result,
        error category and message, never their inputs; [] without `after`."""
        return links.dependencies_of(self.job_id)

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
        """Open the referenced upload after re-checking access; it must be the tenant's."""
        from .selectors import job_input_object_open

        self._ensure_owned()
        self.check_access()
        return job_input_object_open(
            job_id=self.job_id, tenant_id=self.tenant_id, owner_id=self.owner
        )

    def for_tenant[M: Model](
        self,
        source: type[M] | QuerySet[M],
        *,
        tenant_field: str = "tenant",
        owner_field: str | None = "owner",
    ) -> QuerySet[M]:
        """`source` narrowed to this job's tenant (a personal job: the owner's untenanted rows).

        No access re-check: call `check_access()` first, or use `get_for_tenant()`.
        """
        from .selectors import rows_of_job_tenant

        return rows_of_job_tenant(
            source,
            tenant_id=self.tenant_id,
            owner_id=self.owner,
            tenant_field=tenant_field,
            owner_field=owner_field,
        )

    def get_for_tenant[M: Model](
        self,
        source: type[M] | QuerySet[M],
        pk: Any,
        *,
        tenant_field: str = "tenant",
        owner_field: str | None = "owner",
    ) -> M:
        """Re-check access, then load `pk` only if it belongs to this job's tenant.

        A missing row and another tenant's row raise the same Forbidden (permanent), so a job
        learns nothing about other tenants from an id in its input.
        """
        self._ensure_owned()
        self.check_access()
        rows = self.for_tenant(source, tenant_field=tenant_field, owner_field=owner_field)
        try:
            found = rows.filter(pk=pk).first()
        except (TypeError, ValueError, ValidationError):  # a malformed id is not found either
            found = None
        if found is None:
            raise Forbidden(f"{rows.model._meta.label} not found in this job's tenant")
        return found
