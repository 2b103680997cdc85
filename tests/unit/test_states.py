"""The transition table is the one source of truth: the database trigger must match it."""

from __future__ import annotations

import importlib

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


def test_trigger_transition_pairs__equal_the_states_table() -> None:
    migration = importlib.import_module("jobs.migrations.0002_guard_triggers")

    assert sorted(migration.TRANSITION_PAIRS) == transition_pairs()


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
