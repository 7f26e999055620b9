"""The import rules of ARCHITECTURE.md, checked on the source: layers import one way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "datum_sql"

#: layer (path prefix under datum_sql/) -> module prefixes it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "redaction.py": ("datum_sql",),
    "durable.py": ("datum_sql",),
    "errors.py": ("datum_sql",),
    "types.py": ("datum_sql",),
    "catalog/": ("datum_sql.sql", "datum_sql.plan", "datum_sql.engine", "datum_sql.connectors", "datum_sql.context"),
    "sql/": ("datum_sql.plan", "datum_sql.engine", "datum_sql.connectors", "datum_sql.context"),
    "plan/": ("asyncio", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.engine.operators", "datum_sql.context"),
    "engine/operators/": ("sqlglot", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.sql", "datum_sql.plan", "datum_sql.context"),
    "engine/state/": ("sqlglot", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.sql", "datum_sql.plan"),
    "engine/runtime/": ("sqlglot", "datum_sql.sql", "datum_sql.plan", "datum_sql.catalog", "datum_sql.context"),
    "engine/expressions.py": ("sqlglot", "datum_sql.sql", "datum_sql.plan", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.engine.operators"),
    "engine/jobgraph.py": ("datum_sql.sql", "datum_sql.plan", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime"),
    "connectors/": ("datum_sql.sql", "datum_sql.plan", "datum_sql.engine", "datum_sql.catalog", "datum_sql.context"),
}  # fmt: skip

#: Leaf modules a layer may import although its rule above bans the package.
ALLOWED: dict[str, tuple[str, ...]] = {"errors.py": ("datum_sql.redaction",)}

#: Optional dependencies live only in the modules that need them.
OPTIONAL = {
    "aiokafka": "connectors/kafka/",
    "IPython": "notebook/",
    "matplotlib": "notebook/",
    "polars": "notebook/",
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_respects_its_layer(path: Path) -> None:
    rel = str(path.relative_to(PACKAGE))
    imports = _imports(path)
    for layer, banned in FORBIDDEN.items():
        if rel == layer or (layer.endswith("/") and rel.startswith(layer)):
            bad = [
                m
                for m in imports
                if any(m == b or m.startswith(b + ".") for b in banned)
                and m not in ALLOWED.get(rel, ())
            ]
            assert not bad, f"{rel} ({layer}) must not import {bad}"
    for dep, home in OPTIONAL.items():
        if any(m == dep or m.startswith(dep + ".") for m in imports):
            assert rel.startswith(home), f"{rel} imports optional {dep}; only {home} may"


def test_the_rules_cover_every_layer() -> None:
    layers = {p.relative_to(PACKAGE).parts[0] for p in MODULES}
    assert {"catalog", "sql", "plan", "engine", "connectors"} <= layers
