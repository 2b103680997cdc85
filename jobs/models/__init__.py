"""Job, its event trail, the effect ledger, quarantine, tenants and stored objects (one
module per concern; every model is importable from here, as Django expects)."""

from jobs.models.callbacks import (
    AttemptOutcome,
    CallbackAttempt,
    CallbackDelivery,
    DeliveryStatus,
)
from jobs.models.job import Job, JobEvent, StoredObject, Tenant
from jobs.models.ledger import EffectLedgerEntry, EffectState, QuarantineRecord, QuarantineStatus
from jobs.models.links import JobDependency
from jobs.models.ops import Counter, DrainSample, WorkerHeartbeat
from jobs.models.schedule import Schedule, ScheduleAction, ScheduleEvent, ScheduleSource

__all__ = [
    "AttemptOutcome",
    "CallbackAttempt",
    "CallbackDelivery",
    "Counter",
    "DeliveryStatus",
    "DrainSample",
    "EffectLedgerEntry",
    "EffectState",
    "Job",
    "JobDependency",
    "JobEvent",
    "QuarantineRecord",
    "QuarantineStatus",
    "Schedule",
    "ScheduleAction",
    "ScheduleEvent",
    "ScheduleSource",
    "StoredObject",
    "Tenant",
    "WorkerHeartbeat",
]
