"""The transition table is the one source of truth: the database trigger must match it."""

from __future__ import annotations

import importlib
import pkgutil

import jobs.migrations
from jobs.states import (
    CLAIMABLE,
    FINISHED,
    TERMINAL,
    TRANSITIONS,
    JobState,
    can_transition,
    sources_of,
    transition_pairs,
)


def _latest_transition_pairs() -> list[tuple[str, str]]:
    """The edges of the migration that last wrote the guard (each that does says them as
    TRANSITION_PAIRS: 0002, then 0022 for `waiting`)."""
    names = sorted(m.name for m in pkgutil.iter_modules(jobs.migrations.__path__))
    pairs: list[tuple[str, str]] = []
    for name in names:
        migration = importlib.import_module(f"jobs.migrations.{name}")
        pairs = getattr(migration, "TRANSITION_PAIRS", pairs)
    return pairs


def test_trigger_transition_pairs__equal_the_states_table() -> None:
    assert sorted(_latest_transition_pairs()) == transition_pairs()


def test_transition_table__covers_every_state() -> None:
    assert set(TRANSITIONS) == set(JobState)


def test_terminal_states__have_no_way_out() -> None:
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()


def test_succeeded__is_reached_only_from_leased() -> None:
    assert sources_of(JobState.SUCCEEDED) == {JobState.LEASED}


def test_claimable_states__can_be_leased() -> None:
    for state in CLAIMABLE:
        assert can_transition(state, JobState.LEASED)


def test_finished_states__cannot_be_leased_again() -> None:
    for state in FINISHED:
        assert not can_transition(state, JobState.LEASED)


def test_succeeded_to_queued__is_not_a_transition() -> None:
    assert not can_transition(JobState.SUCCEEDED, JobState.QUEUED)


def test_every_state__has_a_django_tasks_status() -> None:
    from jobs.tasks_backend.results import STATUS

    assert set(STATUS) == set(JobState)


def test_waiting__shows_as_queued__and_is_neither_claimable_nor_finished() -> None:
    from jobs.states import ACTIVE, CLIENT_STATUS, ClientStatus

    assert CLIENT_STATUS[JobState.WAITING] is ClientStatus.QUEUED
    assert JobState.WAITING not in CLAIMABLE | FINISHED | ACTIVE
    assert TRANSITIONS[JobState.WAITING] == {JobState.QUEUED, JobState.CANCELLED}
