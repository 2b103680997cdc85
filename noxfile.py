"""The unit tests on every supported Python and Django: `make test-matrix` (or `nox -s unit`).

Each session installs the repository editable with the example project's and tracing's
extras and the four test tools at the versions pyproject's `dev` extra pins, then pins
Django last. The virtualenvs live in var/nox (ignored by git, removed by `make clean`) and
are reused, so a second run only checks what is installed.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox
import nox.command

ROOT = Path(__file__).resolve().parent
PYTHONS = ["3.12", "3.13"]
DJANGOS = ["6.0", "6.1"]
# What tests/unit imports beyond the library and the example project.
UNIT_TOOLS = {"pytest", "pytest-django", "pytest-timeout", "hypothesis"}

nox.options.envdir = str(ROOT / "var" / "nox")
nox.options.reuse_venv = "yes"
# uv (pyproject's dev extra) installs in seconds what pip takes a minute for; plain
# virtualenv and pip when uv is missing.
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.download_python = "never"  # use the installed Pythons; CI downloads none
nox.options.error_on_missing_interpreters = True  # a missing Python fails, never skips
nox.options.sessions = ["unit"]


def dev_pins(names: set[str]) -> list[str]:
    """The requirements of pyproject's `dev` extra for `names`, pins included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = []
    for requirement in project["optional-dependencies"]["dev"]:
        name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()
        if name in names:
            wanted.append(requirement)
    assert len(wanted) == len(names), f"pyproject's dev extra lacks some of {sorted(names)}"
    return wanted


def runs(python: str) -> bool:
    """True when `python` starts (a pyenv shim for a version not selected does not)."""
    try:
        done = subprocess.run([python, "-c", ""], capture_output=True, timeout=30)
    except OSError:
        return False
    return done.returncode == 0


def interpreters_on_path(versions: list[str]) -> None:
    """Put a working pythonX.Y of each version first on PATH for nox to find.

    pyenv installs every version but its shims run only the selected ones; the interpreters
    themselves sit in ~/.pyenv/versions/X.Y.Z/bin.
    """
    found = []
    for version in versions:
        pyenv = os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")
        candidates = [
            shutil.which(f"python{version}"),
            *sorted(glob.glob(pyenv), reverse=True),
            f"/usr/local/bin/python{version}",
            f"/usr/bin/python{version}",
        ]
        for python in filter(None, candidates):
            if os.path.exists(python) and runs(python):
                found.append(str(Path(python).parent))
                break
    os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


interpreters_on_path(PYTHONS)


def install(session: nox.Session, *args: str) -> None:
    """session.install, and once more if the installer was killed by a signal: uv died of
    SIGSEGV once in CI after it had installed every package (a crash of the tool, not a
    requirement it could not meet; that exits with a code of its own and is not retried)."""
    try:
        session.install(*args)
    except nox.command.CommandFailed as failed:
        if failed.return_code is None or failed.return_code >= 0:
            raise
        session.warn(f"the installer was killed by signal {-failed.return_code}; once more")
        session.install(*args)


@nox.session(python=PYTHONS)
@nox.parametrize("django", DJANGOS)
def unit(session: nox.Session, django: str) -> None:
    install(session, "-e", ".[demo,otel]", *dev_pins(UNIT_TOOLS))
    install(session, f"Django=={django}.*")
    # A test database of this session's own: other runs may share the server.
    prefix = os.environ.get("JOBS_TEST_DATABASE_NAME", "test_dj_nox")
    suffix = f"py{session.python}_dj{django}".replace(".", "")
    session.run(
        "pytest",
        "tests/unit",
        "-p",
        "no:xdist",
        *session.posargs,
        env={"JOBS_TEST_DATABASE_NAME": f"{prefix}_{suffix}"},
    )
