"""What a package index and a type checker read about datum-sql."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import datum_sql
from datum_sql.cli import main

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_package_says_it_is_typed() -> None:
    # PEP 561: the marker file ships inside the package
    assert (ROOT / "datum_sql" / "py.typed").is_file()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["datum_sql"]
    assert "Typing :: Typed" in PROJECT["project"]["classifiers"]


def test_the_classifiers_match_what_the_project_declares() -> None:
    meta = PROJECT["project"]
    minimum = meta["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {minimum}" in meta["classifiers"]
    assert len(set(meta["classifiers"])) == len(meta["classifiers"])
    assert all(" :: " in c for c in meta["classifiers"])


def test_version_prints_the_one_version(capsys) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"datum-sql {datum_sql.__version__}"


def test_the_build_reads_the_version_from_the_package() -> None:
    # one version, datum_sql.__version__: the build backend reads it from [tool.setuptools.dynamic],
    # statically (without importing the package) because it is a plain string literal
    assert "version" not in PROJECT["project"]
    assert "version" in PROJECT["project"]["dynamic"]
    module, _, name = PROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"].rpartition(".")
    assert module == "datum_sql"
    tree = ast.parse((ROOT / "datum_sql" / "__init__.py").read_text())
    literals = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]
    ]
    assert literals == [datum_sql.__version__]


def test_version_from_the_command_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "datum_sql.cli", "--version"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == f"datum-sql {datum_sql.__version__}"
