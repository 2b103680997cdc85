"""The hot functions' SQL files (jobs/sql) are what the migrated database runs, and every
state list in them is a set of jobs/states.py."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction

from jobs.sql import FUNCTIONS, HERE, sql_file
from jobs.states import ACTIVE, CLAIMABLE, FINISHED, TERMINAL, JobState

pytestmark = pytest.mark.django_db

_BODY = re.compile(r"\$\$(.*?)\$\$", re.S)
_SET = re.compile(r"^SET\s+(\w+)\s*=\s*(\w+)\s*$", re.M)
_COMMENT = re.compile(r"--[^\n]*")
# `state IN ('a', 'b')`, and the state lists a function passes as parameters (a plan must not
# prove a partial index from a literal list): `claimable_states CONSTANT text[] := ARRAY[...]`.
_STATE_LIST = re.compile(
    r"\bstate\s+IN\s*\(([^)]*)\)|_states\s+CONSTANT\s+text\[\]\s*:=\s*ARRAY\[([^\]]*)\]", re.I
)
_STATE_LITERAL = re.compile(
    r"\bstate\s*(?:=|<>|!=)\s*'([^']*)'|_state\s+CONSTANT\s+text\s*:=\s*'([^']*)'", re.I
)
_QUOTED = re.compile(r"'([^']*)'")

STATE_SETS = {
    "FINISHED": {s.value for s in FINISHED},
    "CLAIMABLE": {s.value for s in CLAIMABLE},
    "ACTIVE": {s.value for s in ACTIVE},
    "TERMINAL": {s.value for s in TERMINAL},
}
STATES = {s.value for s in JobState}


def file_definition(text: str) -> tuple[str, list[str] | None]:
    """(the text between the `$$` delimiters, the SET clause as pg_proc.proconfig says it)."""
    bodies = _BODY.findall(text)
    assert len(bodies) == 1, "one dollar-quoted body per file"
    header = _COMMENT.sub("", text.split("$$", 1)[0])
    config = [f"{name}={value}" for name, value in _SET.findall(header)]
    return bodies[0], config or None


def database_definitions(name: str) -> list[tuple[str, list[str] | None]]:
    """(prosrc, proconfig) of every function called `name` in the current schema."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.prosrc, p.proconfig FROM pg_proc p "
            "WHERE p.proname = %s AND p.pronamespace = current_schema()::regnamespace",
            [name],
        )
        return [(row[0], row[1]) for row in cursor.fetchall()]


def drift(name: str, text: str | None = None) -> list[str]:
    """How the database's `name` differs from `text` (default: its file); [] when equal."""
    body, config = file_definition(sql_file(name) if text is None else text)
    found = database_definitions(name)
    if len(found) != 1:
        return [f"{name}: {len(found)} functions of that name in the database"]
    problems = []
    prosrc, proconfig = found[0]
    if prosrc != body:
        problems.append(f"{name}: the body differs from the file")
    if proconfig != config:
        problems.append(f"{name}: SET {proconfig} in the database, {config} in the file")
    return problems


def _lists(code: str) -> list[str]:
    return [a or b for a, b in _STATE_LIST.findall(code)]


def state_problems(text: str) -> list[str]:
    """State lists and literals of `text` that are not a set (or a state) of jobs/states.py."""
    code = _COMMENT.sub("", text)
    problems = []
    for listed in _lists(code):
        states = set(_QUOTED.findall(listed))
        if states in STATE_SETS.values() or (len(states) == 1 and states <= STATES):
            continue
        problems.append(f"state IN ({listed.strip()})")
    for literal in (a or b for a, b in _STATE_LITERAL.findall(code)):
        if literal not in STATES:
            problems.append(f"state = '{literal}'")
    return problems


def state_sets_used(text: str) -> set[str]:
    code = _COMMENT.sub("", text)
    found = {frozenset(_QUOTED.findall(listed)) for listed in _lists(code)}
    return {name for name, states in STATE_SETS.items() if frozenset(states) in found}


def test_every_sql_file_is_a_listed_function_defining_itself() -> None:
    stems = {path.stem for path in HERE.glob("*.sql")}
    assert stems == set(FUNCTIONS)
    for name in FUNCTIONS:
        assert f"CREATE OR REPLACE FUNCTION {name}(" in sql_file(name)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_migrated_database_runs_exactly_the_file(name: str) -> None:
    body, config = file_definition(sql_file(name))
    [(prosrc, proconfig)] = database_definitions(name)

    assert prosrc == body
    assert proconfig == config
    if "\nSET plan_cache_mode = force_generic_plan\n" in sql_file(name):
        assert proconfig is not None and "plan_cache_mode=force_generic_plan" in proconfig
    if "\nSET lock_timeout = 5000\n" in sql_file(name):  # every hot function's lock waits end
        assert proconfig is not None and "lock_timeout=5000" in proconfig
    assert drift(name) == []


def test_the_drift_check_fails_on_a_changed_body_or_set_clause__database_restored() -> None:
    """Changed in the database (inside a transaction rolled back at once), or changed in the
    file: either way the check names the difference."""
    text = sql_file("jobs_claim_many")
    changed = text.replace("'claimed in a batch'", "'claimed in a batch (changed)'")
    assert changed != text
    assert drift("jobs_claim_many", changed) == ["jobs_claim_many: the body differs from the file"]
    no_set = text.replace("SET plan_cache_mode = force_generic_plan\n", "")
    assert drift("jobs_claim_many", no_set) == [
        "jobs_claim_many: SET ['plan_cache_mode=force_generic_plan', 'lock_timeout=5000'] "
        "in the database, ['lock_timeout=5000'] in the file"
    ]

    class Restore(Exception):
        pass

    with pytest.raises(Restore), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(changed)
        cursor.execute(
            "ALTER FUNCTION jobs_claim_many(uuid[], text[], int[], double precision[], text, "
            "boolean, int, int) RESET plan_cache_mode"
        )
        assert drift("jobs_claim_many") == [
            "jobs_claim_many: the body differs from the file",
            "jobs_claim_many: SET ['lock_timeout=5000'] in the database, "
            "['plan_cache_mode=force_generic_plan', 'lock_timeout=5000'] in the file",
        ]
        raise Restore

    assert drift("jobs_claim_many") == []


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_state_list_in_the_files_is_a_set_of_states_py(name: str) -> None:
    assert state_problems(sql_file(name)) == []


def test_the_state_lists_are_found__and_a_wrong_one_is_reported() -> None:
    """The check reads what it should: jobs_claim_many names all three sets; a list that is no
    set of states.py, or a state that does not exist, is reported."""
    assert state_sets_used(sql_file("jobs_claim_many")) == {"FINISHED", "CLAIMABLE", "ACTIVE"}
    assert state_sets_used(sql_file("jobs_admission_lock")) == {"ACTIVE"}
    assert state_problems(sql_file("jobs_complete_many")) == []
    assert state_problems("leased_state CONSTANT text := 'lesaed';") == ["state = 'lesaed'"]
    assert state_problems("x_states CONSTANT text[] := ARRAY['queued', 'leased'];") == [
        "state IN ('queued', 'leased')"
    ]
    wrong = "WHERE j.state IN ('queued', 'leased') AND e.state = 'running' AND x.state = 'leased'"
    assert state_problems(wrong) == ["state IN ('queued', 'leased')", "state = 'running'"]
    shortened = sql_file("jobs_claim_many").replace("'failed', 'cancelled'", "'cancelled'")
    assert state_problems(shortened) == ["state IN ('succeeded', 'cancelled', 'quarantined')"]
