"""The seed statements the fuzz test mutates: the SQL this project already shows and tests.

- docs/*.md and README.md: every string in a ```python block that starts like a statement
  (f-string holes become ``x``);
- tests/fixtures/parse/: the identity lines and the error blocks;
- the golden queries, built by the golden modules' own query functions;
- the string constants of the other test files that start like a statement.

Seeds are normalized so a run stays small and local: generator sizes are capped, pacing
is removed, and paths are made relative (the test runs in a temporary directory).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STATEMENT = re.compile(r"^\s*(SELECT|WITH|CREATE|INSERT|EXPLAIN|SET|SHOW|DROP)\b", re.IGNORECASE)
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def _strings(code: str) -> list[str]:
    """String constants (and f-strings, holes as ``x``) of Python source that look like SQL."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "x" for v in node.values)
        else:
            continue
        if STATEMENT.match(text):
            out.append(text.strip())
    return out


def doc_statements() -> list[str]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [
        s for page in pages for block in BLOCK.findall(page.read_text()) for s in _strings(block)
    ]


def fixture_statements() -> list[str]:
    parse = ROOT / "tests" / "fixtures" / "parse"
    out = [
        line
        for line in (parse / "identity.sql").read_text().splitlines()
        if line.strip() and not line.startswith("--")
    ]
    for block in (parse / "errors.sql").read_text().split("\n\n"):
        sql = "\n".join(line for line in block.splitlines() if not line.startswith("--"))
        if sql.strip():
            out.append(sql)
    return out


def _load(path: Path) -> object:
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"fuzz_seed_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


def golden_statements() -> list[str]:
    golden = ROOT / "tests" / "golden"
    windows = _load(golden / "test_windows_golden.py")
    joins = _load(golden / "test_joins_golden.py")
    stateless = _load(golden / "test_stateless_golden.py")
    out: list[str] = []
    for case in windows.RESTORE_CASES.values():  # type: ignore[attr-defined]
        out.extend(case[:2])
    for case in joins.RESTORE_CASES.values():  # type: ignore[attr-defined]
        out.extend(case)
    projections, predicates = stateless.PROJECTIONS, stateless.PREDICATES  # type: ignore[attr-defined]
    for i, p in enumerate(predicates):
        cols = ", ".join(projections[(i * 3 + j) % len(projections)] for j in range(3))
        out.append(f"SELECT {cols} FROM t WHERE {p}")
    out.append(f"SELECT {', '.join(projections)} FROM t")
    return out


def suite_statements() -> list[str]:
    own = Path(__file__).resolve().parent
    files = [
        f
        for f in sorted((ROOT / "tests").rglob("*.py"))
        if own not in f.parents and f.name != "conftest.py"
    ]
    return [s for f in files for s in _strings(f.read_text())]


def normalize(sql: str) -> str:
    """Small, unpaced generators; paths relative to the working directory; Kafka brokers
    on a closed loopback port (nothing leaves the machine), given up on after 2 s (the
    ``retry.deadline``) rather than the default minute."""
    sql = re.sub(
        r"(bootstrap\.servers?\s*=\s*')[^']*'",
        r"\g<1>127.0.0.1:1', retry.deadline = '2s'",
        sql,
        flags=re.I,
    )
    sql = re.sub(r"(\brows\s*=\s*')\d+(')", r"\g<1>200\2", sql, flags=re.I)
    sql = re.sub(r",?\s*events_per_second\s*=\s*'[^']*'", "", sql, flags=re.I)
    return re.sub(
        r"(\bpath\s*=\s*')([^']*)'",
        lambda m: m.group(1) + m.group(2).lstrip("/").replace("..", "_") + "'",
        sql,
        flags=re.I,
    )


def seeds() -> list[str]:
    """Every seed once, in a stable order."""
    found = [*doc_statements(), *fixture_statements(), *golden_statements(), *suite_statements()]
    return list(dict.fromkeys(normalize(s) for s in found))
