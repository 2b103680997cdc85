"""The wheel alone is the product: README's "Use it in your project", followed literally.

The wheel is built from the repository's files, installed in a fresh virtualenv outside it,
and used by a project made by `django-admin startproject` from the README's own blocks and
commands: `manage.py check` and `migrate`, that project's worker and beat, a job submitted
from Python and one through the mounted API, each run once. Nothing of the repository is
importable there (no PYTHONPATH, another directory): the wheel has to carry everything.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.harness import ROOT, PrivateRedis, Proc, wait_until

# About 45 s alone on two cores; the bound leaves room for a loaded CI machine.
pytestmark = [pytest.mark.wheel, pytest.mark.timeout(240)]

README = ROOT / "README.md"
SECTION = "## Use it in your project"
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)
FILE_HEADER = re.compile(r"^# (?P<path>[\w/]+\.py)(?P<append>, at the end)?$")
LIBRARY = ("jobs", "outbox")
OPS_TEMPLATE = "jobs/templates/jobs/ops/index.html"
# The repository's example project, tests and tools: none of them may ship or be importable.
NOT_SHIPPED = ("jobsite", "documents", "demo", "tests", "bench", "scripts")


# --- the README section ------------------------------------------------------------------


@dataclass(frozen=True)
class ReadmeSetup:
    """What "Use it in your project" tells a user to write and run."""

    files: dict[str, str]  # path in the project -> text
    appends: dict[str, str]  # path in the project -> text added at its end
    examples: list[str]  # python blocks that are no file (the submit example)
    commands: list[str]  # the inline `...` commands, in order


def readme_section() -> str:
    text = README.read_text()
    start = text.index(SECTION + "\n")
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else len(text)]


def readme_setup() -> ReadmeSetup:
    section = readme_section()
    files: dict[str, str] = {}
    appends: dict[str, str] = {}
    examples: list[str] = []
    for match in FENCE.finditer(section):
        assert match.group("info").strip() == "python", match.group(0)
        body = match.group("body")
        header = FILE_HEADER.match(body.splitlines()[0])
        if header is None:
            examples.append(body)
        elif header.group("append"):
            appends[header.group("path")] = body
        else:
            files[header.group("path")] = body
    prose = FENCE.sub("", section)
    commands = [
        " ".join(span.split())  # a span may wrap across lines
        for span in re.findall(r"`([^`]+)`", prose)
        if span.split()[0] in {"pip", "python", "django-admin", "celery"}
    ]
    return ReadmeSetup(files, appends, examples, commands)


def readme_command(setup: ReadmeSetup, prefix: str) -> list[str]:
    (found,) = [c for c in setup.commands if c.startswith(prefix)]
    return shlex.split(found)


def substituted(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert text.count(old) == 1, f"the README's settings block lost {old!r}"
        text = text.replace(old, new)
    return text


def test_readme_section_gives_every_file_and_command__use_it_in_your_project() -> None:
    setup = readme_setup()
    assert set(setup.files) == {
        "proj/celery.py",
        "proj/__init__.py",
        "proj/urls.py",
        "reports/kinds.py",
    }
    assert set(setup.appends) == {"proj/settings.py"}
    assert len(setup.examples) == 1 and "jobs.submit(" in setup.examples[0]
    for prefix in (
        "django-admin startproject proj",
        "python manage.py startapp reports",
        "pip install durable-jobs",
        "python manage.py migrate",
        "celery -A proj worker",
        "celery -A proj beat",
    ):
        assert readme_command(setup, prefix), prefix
    settings_block = setup.appends["proj/settings.py"]
    # Nothing of durable-jobs beyond the two apps and the broker URL.
    assert not re.search(r"^(JOBS_|OUTBOX_)", settings_block, re.MULTILINE)
    assert [
        line.split("=")[0].split("+")[0].strip()
        for line in settings_block.splitlines()
        if re.match(r"^[A-Z]", line)
    ] == ["INSTALLED_APPS", "DATABASES", "CELERY_BROKER_URL"]


# --- building and installing ---------------------------------------------------------------


def run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, check: bool = True
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check:
        assert done.returncode == 0, (
            f"{shlex.join(argv)} exited {done.returncode}\n"
            f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
        )
    return done


def repository_files() -> list[str]:
    """The files git sees (committed or new, not ignored): what a clone or an sdist has."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name and (ROOT / name).is_file()})


def build_wheel(workdir: Path) -> Path:
    """`pip wheel` on a clean copy of the repository: an in-tree build would leave build/ in
    the work tree, and a stale build/lib can put deleted modules into the next wheel."""
    source = workdir / "source"
    for name in repository_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    dist = workdir / "dist"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(dist),
            str(source),
        ],
        cwd=workdir,
        env=clean_env(pip=True),
        timeout=180,
    )
    (wheel,) = dist.glob("durable_jobs-*.whl")
    return wheel


def clean_env(*, venv: Path | None = None, pip: bool = False) -> dict[str, str]:
    """A user's shell: no PYTHONPATH, no virtualenv of ours, none of the suite's variables."""
    path = "/usr/local/bin:/usr/bin:/bin"
    env = {
        "PATH": f"{venv / 'bin'}:{path}" if venv else path,
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
    }
    if pip:  # the machine's index settings (and pip's cache, under HOME)
        env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    return env


def make_venv(workdir: Path, wheel: Path, setup: ReadmeSetup) -> Path:
    """Python 3.12 (this interpreter's base) and the README's pip command, with our wheel."""
    venv = workdir / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", str(venv)], cwd=workdir, env=clean_env(), timeout=120)
    pip_install = readme_command(setup, "pip install")
    assert pip_install[:3] == ["pip", "install", "durable-jobs"], pip_install
    argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)]
    run([*argv, *pip_install[3:]], cwd=workdir, env=clean_env(venv=venv, pip=True), timeout=240)
    return venv


# --- the fresh project ---------------------------------------------------------------------


@dataclass
class FreshProject:
    venv: Path
    root: Path
    database: dict[str, Any]
    procs: list[Proc] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return clean_env(venv=self.venv)

    def tool(self, argv: list[str]) -> list[str]:
        """A README command with the venv's own executables (`python`, `celery`...)."""
        return [str(self.venv / "bin" / argv[0]), *argv[1:]]

    def run(
        self, argv: list[str], *, timeout: float = 120, check: bool = True, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return run(
            self.tool(argv), cwd=self.root, env={**self.env, **env}, timeout=timeout, check=check
        )

    def spawn(self, name: str, argv: list[str]) -> Proc:
        log_path = self.root.parent / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                self.tool(argv),
                cwd=self.root,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def python(self, script: str, *args: str, timeout: float = 120) -> Any:
        """Run `script` in the project (django.setup() done); its last stdout line is JSON."""
        path = self.root / "wheel_probe.py"
        path.write_text(PROBE_PRELUDE + script)
        done = self.run(["python", path.name, *args], timeout=timeout)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def query(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(**self.database, autocommit=True) as conn:
            return conn.execute(statement, params).fetchall()


PROBE_PRELUDE = """\
import json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
import django
django.setup()
"""

ISOLATION_PROBE = """
import importlib, importlib.util, jobs, outbox
print(json.dumps({
    "library": {m: importlib.import_module(m).__file__ for m in ("jobs", "outbox")},
    "importable": [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None],
    "sys_path": sys.path,
    "python": list(sys.version_info[:2]),
}))
"""

SUBMIT_PROBE = """
from types import SimpleNamespace
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.test.utils import setup_test_environment
import jobs
from jobs.models import Job
from outbox.models import OutboxEntry

setup_test_environment()  # the test Client's host, "testserver", is allowed
User = get_user_model()
alice = User.objects.create_user(username="alice", password="pw")
root = User.objects.create_superuser(username="root", password="pw")

# The README's example, with a request of alice's.
namespace = {"request": SimpleNamespace(user=alice)}
exec(open(sys.argv[1]).read(), namespace)
python_job = namespace["job"]

client = Client()
client.force_login(alice)
body = {"kind": "report.build", "input": {"title": "Q4"}}
response = client.post("/api/jobs/", data=json.dumps(body), content_type="application/json")

before = (Job.objects.count(), OutboxEntry.objects.count())
rolled_back = None
try:
    with transaction.atomic():
        rolled_back = jobs.submit(kind="report.build", input={"title": "never"}, owner=alice)
        raise RuntimeError("the caller's transaction fails")
except RuntimeError:
    pass
after = (Job.objects.count(), OutboxEntry.objects.count())

staff = Client()
staff.force_login(root)
pages = {url: staff.get(url).status_code for url in
         ("/ops/", "/metrics", "/api/schema/", "/admin/jobs/job/", "/admin/outbox/outboxentry/")}
print(json.dumps({
    "python_job": str(python_job.pk),
    "api_status": response.status_code,
    "api_body": response.json() if response.headers.get("Content-Type", "").startswith(
        "application/json") else response.content.decode()[:2000],
    "api_location": response.headers.get("Location"),
    "before": before,
    "after": after,
    "rolled_back": str(rolled_back.pk) if rolled_back else None,
    "rolled_back_exists": Job.objects.filter(pk=rolled_back.pk).exists() if rolled_back else None,
    "pages": pages,
}))
"""


def database_params() -> dict[str, Any]:
    """The server the suite uses (tests/settings.py), on its maintenance database."""
    from django.db import connection

    s = connection.settings_dict
    return {
        "host": s["HOST"] or "127.0.0.1",
        "port": int(s["PORT"] or 5432),
        "user": s["USER"] or "postgres",
        "dbname": "postgres",
    }


@pytest.fixture
def fresh_database() -> Iterator[dict[str, Any]]:
    server = database_params()
    name = f"dj_wheel_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield {**server, "dbname": name}
    finally:
        with psycopg.connect(**server, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    redis = PrivateRedis()
    try:
        redis.start()
        yield redis
    finally:
        redis.close()


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="jobs-wheel-"))
    try:
        yield path
    finally:
        if not os.environ.get("JOBS_TEST_KEEP_LOGS"):
            shutil.rmtree(path, ignore_errors=True)


def write_project(project: FreshProject, setup: ReadmeSetup, broker_url: str) -> None:
    """The README's files, its settings block with this test's database and broker."""
    db = project.database
    for name, text in setup.files.items():
        (project.root / name).write_text(text)
    settings_block = substituted(
        setup.appends["proj/settings.py"],
        {
            '"NAME": "proj"': f'"NAME": "{db["dbname"]}"',
            '"USER": "postgres"': f'"USER": "{db["user"]}"',
            '"HOST": "127.0.0.1"': f'"HOST": "{db["host"]}", "PORT": "{db["port"]}"',
            '"redis://127.0.0.1:6379/0"': f'"{broker_url}"',
        },
    )
    settings = project.root / "proj" / "settings.py"
    settings.write_text(settings.read_text() + "\n" + settings_block)
    # The same project without a broker URL, for `manage.py check` to refuse.
    (project.root / "proj" / "settings_no_broker.py").write_text(
        "from proj.settings import *  # noqa\n\ndel CELERY_BROKER_URL\n"
    )


def assert_wheel_is_the_library(wheel: Path) -> None:
    """`jobs/` and `outbox/` exactly as in the repository (templates, migrations and all),
    plus the dist-info; nothing of the example project, the tests or the tools."""
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == set(LIBRARY), sorted(top)
    assert OPS_TEMPLATE in names
    shipped = sorted(n for n in names if n.split("/")[0] in LIBRARY)
    library = [n for n in repository_files() if n.split("/")[0] in LIBRARY]
    assert shipped == library, (
        f"in the repository, not in the wheel: {sorted(set(library) - set(shipped))}; "
        f"in the wheel only: {sorted(set(shipped) - set(library))}"
    )


def make_project(
    workdir: Path, setup: ReadmeSetup, database: dict[str, Any], broker_url: str
) -> FreshProject:
    """The wheel in a fresh virtualenv; the README's commands and files in a new project."""
    wheel = build_wheel(workdir)
    assert_wheel_is_the_library(wheel)
    venv = make_venv(workdir, wheel, setup)
    project = FreshProject(venv=venv, root=workdir / "site" / "proj", database=database)
    project.root.mkdir(parents=True)
    # `django-admin startproject proj` in the project's directory, then the user's app.
    project.run([*readme_command(setup, "django-admin startproject"), "."])
    project.run(readme_command(setup, "python manage.py startapp"))
    write_project(project, setup, broker_url)
    return project


def assert_works_alone(project: FreshProject) -> None:
    """Nothing of the repository can be imported in the project: the wheel works alone."""
    found = project.python(ISOLATION_PROBE, *NOT_SHIPPED)
    assert found["importable"] == [], found
    for module in LIBRARY:
        assert found["library"][module].startswith(str(project.venv)), found
    assert not [p for p in found["sys_path"] if p.startswith(str(ROOT))], found
    assert found["python"] == list(sys.version_info[:2]), found  # the suite's: 3.12


def assert_check_requires_broker(project: FreshProject) -> None:
    checked = project.run(["python", "manage.py", "check"])
    assert "no issues" in checked.stdout, checked
    refused = project.run(
        ["python", "manage.py", "check"],
        check=False,
        DJANGO_SETTINGS_MODULE="proj.settings_no_broker",
    )
    assert refused.returncode != 0, refused
    assert "outbox.E002" in refused.stderr and "CELERY_BROKER_URL" in refused.stderr


def start_worker_and_beat(project: FreshProject, setup: ReadmeSetup) -> tuple[Proc, Proc]:
    """The README's commands; one pool process, and no waiting for other workers."""
    worker = project.spawn(
        "worker",
        [
            *readme_command(setup, "celery -A proj worker"),
            "--concurrency=1",
            "--pool=prefork",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
        ],
    )
    beat = project.spawn("beat", [*readme_command(setup, "celery -A proj beat"), "--loglevel=INFO"])
    wait_until(
        lambda: "ready." in worker.log() or not worker.alive(),
        timeout=60,
        what="the fresh project's worker to be ready",
    )
    assert worker.alive(), f"the worker died at start:\n{worker.log()[-3000:]}"
    return worker, beat


def job_trail(project: FreshProject, job_id: str) -> list[tuple[str, str]]:
    rows = project.query(
        "SELECT from_state, to_state FROM jobs_jobevent WHERE job_id = %s ORDER BY at, id",
        uuid.UUID(job_id),
    )
    return [(str(a), str(b)) for a, b in rows]


def finished(project: FreshProject, job_ids: list[str]) -> bool:
    rows = project.query(
        "SELECT state FROM jobs_job WHERE id = ANY(%s)", [uuid.UUID(j) for j in job_ids]
    )
    return len(rows) == len(job_ids) and all(
        state in {"succeeded", "failed", "cancelled"} for (state,) in rows
    )


def assert_each_ran_once(project: FreshProject, expected: dict[str, dict[str, Any]]) -> None:
    """Succeeded on the first attempt, claimed once and completed once, with its result."""
    wait_until(
        lambda: finished(project, list(expected)),
        timeout=60,
        what="both jobs to finish on the fresh project's worker",
    )
    rows = project.query(
        "SELECT id, state, attempt, generation, result FROM jobs_job WHERE id = ANY(%s)",
        [uuid.UUID(j) for j in expected],
    )
    assert {str(r[0]): r[1:] for r in rows} == {
        job_id: ("succeeded", 1, 1, result) for job_id, result in expected.items()
    }
    for job_id in expected:
        trail = job_trail(project, job_id)
        assert trail == [("", "queued"), ("queued", "leased"), ("leased", "succeeded")], trail


def test_wheel_in_fresh_project__readme_steps__two_jobs_each_run_once(
    fresh_database: dict[str, Any], private_redis: PrivateRedis, workdir: Path
) -> None:
    setup = readme_setup()
    project = make_project(workdir, setup, fresh_database, private_redis.url)
    assert_works_alone(project)
    assert_check_requires_broker(project)
    project.run(readme_command(setup, "python manage.py migrate"), timeout=180)
    try:
        worker, beat = start_worker_and_beat(project, setup)
        example = project.root / "submit_example.py"
        example.write_text(setup.examples[0])

        submitted = project.python(SUBMIT_PROBE, example.name)

        assert submitted["api_status"] == 202, submitted
        api_job = submitted["api_body"]["id"]
        assert submitted["api_location"] == f"/api/jobs/{api_job}/"
        # A submit in a transaction that raised: no job, no outbox row.
        assert submitted["before"] == submitted["after"], submitted
        assert submitted["rolled_back"] and submitted["rolled_back_exists"] is False
        assert not project.query(
            "SELECT 1 FROM outbox_outboxentry WHERE job_id = %s",
            uuid.UUID(submitted["rolled_back"]),
        )
        # The ops page (its template comes from the wheel), metrics, the schema, the admin.
        assert submitted["pages"] == dict.fromkeys(submitted["pages"], 200), submitted
        assert_each_ran_once(
            project,
            {
                submitted["python_job"]: {"title": "Q3", "pages": 12},
                api_job: {"title": "Q4", "pages": 12},
            },
        )
        # Beat runs the library's maintenance on the project's own schedule.
        wait_until(
            lambda: "jobs.maintenance.reap" in worker.log() and "outbox.relay_tick" in worker.log(),
            timeout=30,
            what="beat's maintenance tasks to run",
        )
        assert beat.alive() and worker.alive()
    finally:
        for proc in reversed(project.procs):
            proc.stop()
