"""Job states and the transition table: the one source of truth (no model imports here)."""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"  # accepted and committed; due at next_attempt_at
    WAITING = "waiting"  # accepted with `after=`: released to queued when its dependencies end
    LEASED = "leased"  # owned by one worker until lease_until, fenced by generation
    RETRY_WAIT = "retry_wait"  # a recoverable failure; due again at next_attempt_at
    SUCCEEDED = "succeeded"  # the one committed business result is stored
    QUARANTINED = "quarantined"  # stopped for an operator: see its QuarantineRecord
    CANCELLED = "cancelled"  # stopped on request (or superseded by a newer input version)
    FAILED = "failed"  # an operator discarded it from quarantine

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.LEASED, JobState.CANCELLED}),
    # Released by the database when its last dependency ends (jobs/sql/jobs_job_after_state.sql).
    JobState.WAITING: frozenset({JobState.QUEUED, JobState.CANCELLED}),
    JobState.LEASED: frozenset(
        {
            JobState.SUCCEEDED,
            JobState.RETRY_WAIT,
            JobState.QUARANTINED,
            JobState.CANCELLED,
            JobState.LEASED,  # an expired lease taken over by a new generation
        }
    ),
    JobState.RETRY_WAIT: frozenset({JobState.LEASED, JobState.CANCELLED, JobState.QUARANTINED}),
    JobState.QUARANTINED: frozenset({JobState.QUEUED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.FAILED: frozenset(),
}

TERMINAL: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.CANCELLED, JobState.FAILED})
# Finished for the worker: nothing left to execute (quarantine waits for an operator).
FINISHED: frozenset[JobState] = TERMINAL | {JobState.QUARANTINED}
CLAIMABLE: frozenset[JobState] = frozenset({JobState.QUEUED, JobState.RETRY_WAIT})
ACTIVE: frozenset[JobState] = frozenset({JobState.QUEUED, JobState.LEASED, JobState.RETRY_WAIT})


class ClientStatus(StrEnum):
    """The names the HTTP API shows; stable public contract."""

    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


CLIENT_STATUS: dict[JobState, ClientStatus] = {
    JobState.QUEUED: ClientStatus.QUEUED,
    JobState.WAITING: ClientStatus.QUEUED,  # with `waiting_for` in the API
    JobState.LEASED: ClientStatus.RUNNING,
    JobState.RETRY_WAIT: ClientStatus.RETRYING,
    JobState.SUCCEEDED: ClientStatus.SUCCEEDED,
    JobState.QUARANTINED: ClientStatus.FAILED,
    JobState.FAILED: ClientStatus.FAILED,
    JobState.CANCELLED: ClientStatus.CANCELLED,
}


def states_for_client_status(status: ClientStatus) -> list[JobState]:
    return [state for state, client in CLIENT_STATUS.items() if client == status]


def sources_of(target: JobState) -> frozenset[JobState]:
    """Every state from which `target` may be entered."""
    return frozenset(src for src, targets in TRANSITIONS.items() if target in targets)


def can_transition(source: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[source]


def transition_pairs() -> list[tuple[str, str]]:
    """(from, to) pairs, sorted. The database trigger holds a frozen copy of them (its
    migration's TRANSITION_PAIRS); tests/unit/test_states.py checks that the two agree."""
    return sorted((src.value, dst.value) for src, dsts in TRANSITIONS.items() for dst in dsts)


def choices() -> list[tuple[str, str]]:
    return [(state.value, state.label) for state in JobState]
