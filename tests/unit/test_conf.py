"""Library settings: defaults, one typed object, problems named by setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from jobs.conf import JobsSettings, jobs_settings
from jobsite.envsettings import env_number, library_settings_from_env
from outbox.conf import OutboxSettings, Setting, outbox_settings

ROOT = Path(__file__).resolve().parents[2]


def test_every_setting__has_a_default_of_its_annotated_type() -> None:
    for cls in (JobsSettings, OutboxSettings):
        assert set(cls.declared) == set(cls.__annotations__) - {"prefix", "declared"}
        for name, spec in cls.declared.items():
            assert spec.problem(spec.default) is None, f"{cls.prefix}{name}"


def test_every_setting__is_typed_as_its_default_is_checked() -> None:
    for cls in (JobsSettings, OutboxSettings):
        hints = get_type_hints(cls)
        for name, spec in cls.declared.items():
            kind = type(spec.default)
            assert get_origin(hints[name]) is Setting, f"{cls.prefix}{name}"
            if kind is dict:  # dict[str, ...]: what the values are is the setting's own check
                assert get_origin(get_args(hints[name])[0]) is dict, name
                continue
            expected = {list: list[str]}.get(kind, kind)
            assert get_args(hints[name]) == (expected,), name


def test_setting_not_set__reads_its_default(settings: Any) -> None:
    del settings.OUTBOX_RETENTION_SECONDS

    assert outbox_settings.RETENTION_SECONDS == 24 * 3600


def test_setting_overridden__is_read_at_once(settings: Any) -> None:
    assert jobs_settings.QUEUE == "jobs"
    settings.JOBS_QUEUE = "reports"

    assert jobs_settings.QUEUE == "reports"


def test_override_settings__is_read_inside_and_forgotten_after() -> None:
    assert outbox_settings.BATCH_MAX == 20
    with override_settings(OUTBOX_BATCH_MAX=3):
        assert outbox_settings.BATCH_MAX == 3
    assert outbox_settings.BATCH_MAX == 20


def test_unknown_name__is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no setting 'QUEUES'"):
        jobs_settings.QUEUES  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize(
    ("spec", "value", "problem"),
    [
        (Setting(1.0, ""), "1", "must be a number, got str '1'"),
        (Setting(1.0, ""), True, "must be a number, got bool True"),
        (Setting(1, ""), 1.5, "must be a whole number, got float 1.5"),
        (Setting(True, ""), "yes", "must be a boolean, got str 'yes'"),
        (Setting([], ""), "a.kinds,b.kinds", "must be a list of strings, got str"),
        (Setting(1.0, "", positive=True), 0, "must be greater than 0, got 0"),
        (Setting(1.0, "", minimum=0), -1, "must be at least 0, got -1"),
    ],
)
def test_setting_problem__names_what_is_wrong(spec: Setting, value: Any, problem: str) -> None:
    found = spec.problem(value)

    assert found is not None and found.startswith(problem)


def test_settings_of_the_wrong_type__are_system_check_errors(settings: Any) -> None:
    from jobs.checks import jobs_checks
    from outbox.checks import outbox_checks

    settings.JOBS_MAX_INPUT_BYTES = "64k"
    settings.OUTBOX_FAST_PATH = "no"

    jobs_errors = jobs_checks()
    outbox_errors = outbox_checks()

    assert [e.id for e in jobs_errors] == ["jobs.E001"]
    assert "JOBS_MAX_INPUT_BYTES must be a whole number" in jobs_errors[0].msg
    assert [e.id for e in outbox_errors] == ["outbox.E001"]
    assert "OUTBOX_FAST_PATH must be a boolean" in outbox_errors[0].msg


def test_soft_limit_not_below_hard_limit__is_a_system_check_error(settings: Any) -> None:
    from jobs.checks import jobs_checks

    settings.JOBS_TASK_TIME_LIMIT = 60
    settings.JOBS_TASK_SOFT_TIME_LIMIT = 60

    assert [e.id for e in jobs_checks()] == ["jobs.E002"]


def test_mark_interval_near_the_reservation__is_a_system_check_error(settings: Any) -> None:
    from outbox.checks import outbox_checks

    settings.OUTBOX_MARK_INTERVAL = 8
    settings.OUTBOX_RESERVATION_SECONDS = 30

    assert [e.id for e in outbox_checks()] == ["outbox.E004"]


def test_linger_near_the_reservation__is_a_system_check_error(settings: Any) -> None:
    from outbox.checks import outbox_checks

    settings.OUTBOX_LINGER_SECONDS = 4
    settings.OUTBOX_RESERVATION_SECONDS = 30

    assert [e.id for e in outbox_checks()] == ["outbox.E005"]


def test_example_project_env_bridge__parses_by_the_defaults_type() -> None:
    found = library_settings_from_env(
        {
            "JOBS_TASK_TIME_LIMIT": "60",
            "JOBS_PREPARED_STATEMENTS": "0",
            "JOBS_HANDLER_MODULES": "a.kinds, b.kinds",
            "OUTBOX_MARK_INTERVAL": "0.5",
            "OUTBOX_RELAY_BATCH_SIZE": "lots",
            "JOBS_SCHEDULES": '{"nightly": {"kind": "noop", "cron": "0 3 * * *"}}',
            "JOBS_NOT_A_SETTING": "1",
        }
    )

    assert found == {
        "JOBS_TASK_TIME_LIMIT": 60,
        "JOBS_PREPARED_STATEMENTS": False,
        "JOBS_HANDLER_MODULES": ["a.kinds", "b.kinds"],
        "OUTBOX_MARK_INTERVAL": 0.5,
        "OUTBOX_RELAY_BATCH_SIZE": "lots",  # left as text for the system check to name
        "JOBS_SCHEDULES": {"nightly": {"kind": "noop", "cron": "0 3 * * *"}},
    }


def test_operations_doc__lists_every_setting_with_its_default() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()

    for app_settings in (jobs_settings, outbox_settings):
        for name, default, _ in app_settings.reference():
            assert f"| `{name}` | `{default!r}` |" in doc, name


def test_kind_named_outside_the_http_pattern__is_a_system_check_warning() -> None:
    from jobs import registry
    from jobs.checks import jobs_kind_names

    registry.handler("reports build")(lambda ctx, input: {})
    try:
        warnings = jobs_kind_names()
    finally:
        registry.unregister("reports build")

    assert [w.id for w in warnings] == ["jobs.W001"]
    assert "'reports build' cannot be submitted over HTTP" in warnings[0].msg
    assert not any("reports build" in w.msg for w in jobs_kind_names())


@pytest.mark.parametrize(
    ("environ", "default", "expected"),
    [({}, 5, 5), ({"X": " 7 "}, 5, 7), ({"X": "0.5"}, 2.0, 0.5), ({"X": "3"}, 2.0, 3.0)],
)
def test_env_number__reads_the_type_of_its_default(
    environ: dict[str, str], default: float, expected: float
) -> None:
    value = env_number(environ, "X", default)
    assert value == expected and type(value) is type(default)


@pytest.mark.parametrize(("raw", "default"), [("abc", 5), ("1.5", 5), ("", 5), ("ten", 2.0)])
def test_env_number__names_the_variable_of_a_bad_value(raw: str, default: float) -> None:
    with pytest.raises(ImproperlyConfigured, match=rf"^X='{raw}' is not (an integer|a number)"):
        env_number({"X": raw}, "X", default)


def test_a_bad_number_in_the_environment__stops_settings_with_its_name() -> None:
    """The example project's own numeric settings, read at import: the message names the
    variable, where int() said only "invalid literal for int() with base 10"."""
    env = {**os.environ, "DATABASE_CONNECT_TIMEOUT": "abc"}
    done = subprocess.run(
        [sys.executable, "-c", "import jobsite.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "DATABASE_CONNECT_TIMEOUT='abc' is not an integer (unset, it is 5)" in done.stderr
    assert "invalid literal" not in done.stderr
