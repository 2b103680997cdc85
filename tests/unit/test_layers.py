"""`outbox` is the lower layer: none of its files, migrations included, imports `jobs`, names
a migration of `jobs` or a database object of `jobs` in its SQL."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.harness import ROOT

OUTBOX = ROOT / "outbox"
FILES = sorted(OUTBOX.rglob("*.py"))
MIGRATIONS = sorted((OUTBOX / "migrations").glob("0*.py"))
JOBS_OBJECT = re.compile(r"\bjobs_\w+")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _imported(tree: ast.Module) -> list[str]:
    """Every module an import statement or an import_module("...") call names."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.append(str(node.args[0].value))
    return names


def _docstrings(tree: ast.Module) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef))]
    return {
        id(node.body[0].value)
        for node in nodes
        if node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def test_the_outbox_has_files_and_migrations_to_check() -> None:
    assert len(FILES) > 15 and len(MIGRATIONS) >= 3


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_an_outbox_file__imports_nothing_of_jobs(path: Path) -> None:
    tree = _tree(path)

    assert [m for m in _imported(tree) if m == "jobs" or m.startswith("jobs.")] == []


@pytest.mark.parametrize("path", MIGRATIONS, ids=_id)
def test_an_outbox_migration__depends_on_the_outbox_alone_and_its_sql_names_no_jobs_object(
    path: Path,
) -> None:
    tree = _tree(path)
    dependencies = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "dependencies" for t in node.targets)
    ]
    docstrings = _docstrings(tree)
    sql_names = [
        found
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
        for found in JOBS_OBJECT.findall(node.value)
    ]

    assert len(dependencies) == 1
    apps = {
        ast.literal_eval(pair)[0]
        for pair in ast.walk(dependencies[0])
        if isinstance(pair, ast.Tuple)
    }
    assert apps <= {"outbox"}
    assert sql_names == []
