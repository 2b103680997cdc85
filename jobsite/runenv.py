"""Where `make run`'s instance is, for the commands of a second terminal: var/run.env.

`make run` writes the database, broker, ports and web address it was given (or defaulted to)
with `python -m jobsite.runenv var/run.env`; manage.py reads the file the way `.env` files
are read elsewhere (python-dotenv): a variable already set in the environment always wins.
The README's tour sources it for `$WEB_URL`. The file stays when `make run` stops (it then
names an instance that is gone: curl cannot connect, manage.py says which database it could
not reach) until the next `make run` rewrites it.

Processes the test suite starts never read it: their environment was made by the suite
(tests/settings.py marks it), and a developer's `make run` must not leak into them. A test
that wants a file names it with DJANGO_ENV_FILE.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from dotenv import dotenv_values

# DJANGO_ENV_FILE=path reads that file instead; DJANGO_ENV_FILE= (empty) reads none.
FILE_VARIABLE = "DJANGO_ENV_FILE"
# Set in every process the test suite starts (tests/settings.py, SCRUBBED).
TEST_SUITE_MARK = "JOBS_TEST_ENVIRONMENT_SCRUBBED"
# The Procfile's defaults (`${WEB_PORT:-8000}`, ...): tests/unit/test_deploy_files.py compares.
DEFAULT_PORTS = {"WEB_PORT": "8000", "FLOWER_PORT": "5555", "PROVIDER_PORT": "8765"}
HEADER = (
    "# Written by `make run` (jobsite/runenv.py): where its instance is. manage.py reads it\n"
    "# (variables set in the environment win); the README's tour sources it. Rewritten by the\n"
    "# next `make run`; delete it to go back to the defaults.\n"
)


def run_env_values(environ: Mapping[str, str]) -> dict[str, str]:
    """What `make run` starts, from its environment: the Makefile exports the database and
    broker URLs, the ports fall back to the Procfile's defaults."""
    values = {name: environ[name] for name in ("DATABASE_URL", "CELERY_BROKER_URL")}
    for name, default in DEFAULT_PORTS.items():
        values[name] = environ.get(name) or default
    values["WEB_URL"] = f"http://127.0.0.1:{values['WEB_PORT']}"
    return values


def run_env_write(path: Path, values: Mapping[str, str]) -> None:
    """KEY='value' lines that both python-dotenv and a POSIX shell read as they are."""
    lines = [HEADER]
    for name, value in values.items():
        if "'" in value or "\n" in value:
            raise ValueError(f"{name} holds a quote or a newline; {path} cannot carry it")
        lines.append(f"{name}='{value}'\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text("".join(lines))
    partial.replace(path)  # a reader never sees half a file


def env_file(environ: Mapping[str, str], default: Path) -> Path | None:
    """The file this process reads: DJANGO_ENV_FILE, else `default`, none in the suite's."""
    named = environ.get(FILE_VARIABLE)
    if named is not None:
        return Path(named) if named else None
    if environ.get(TEST_SUITE_MARK):
        return None
    return default


def run_env_load(environ: MutableMapping[str, str], default: Path) -> tuple[Path, set[str]] | None:
    """Set the file's variables that `environ` lacks; (the file, the names set), or None when
    there is no file to read."""
    path = env_file(environ, default)
    if path is None or not path.is_file():
        return None
    applied = set()
    for name, value in dotenv_values(path, interpolate=False).items():
        if value is not None and name not in environ:
            environ[name] = value
            applied.add(name)
    return path, applied


def without_password(url: str) -> str:
    """A database URL fit for an error message (libpq's multi-host form `h1:p1,h2:p2` too)."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{hosts}"))


def main(argv: list[str]) -> None:
    """`python -m jobsite.runenv PATH`: write `make run`'s file from this environment."""
    (path,) = argv
    run_env_write(Path(path), run_env_values(os.environ))


if __name__ == "__main__":
    main(sys.argv[1:])
