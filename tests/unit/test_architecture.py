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
    "run_sync.py": ("datum_sql",),
    "extensions.py": ("datum_sql",),
    "optional.py": ("datum_sql",),
    "sample.py": ("datum_sql.context",),
    "catalog/": ("datum_sql.sql", "datum_sql.plan", "datum_sql.engine", "datum_sql.connectors", "datum_sql.context"),
    "sql/": ("datum_sql.plan", "datum_sql.engine", "datum_sql.connectors", "datum_sql.context"),
    "plan/": ("asyncio", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.engine.operators", "datum_sql.context"),
    "engine/operators/": ("sqlglot", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.sql", "datum_sql.plan", "datum_sql.context"),
    "engine/state/": ("sqlglot", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.sql", "datum_sql.plan"),
    "engine/runtime/": ("sqlglot", "datum_sql.sql", "datum_sql.plan", "datum_sql.catalog", "datum_sql.context"),
    "engine/expressions.py": ("sqlglot", "datum_sql.sql", "datum_sql.plan", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime", "datum_sql.engine.operators"),
    "engine/jobgraph.py": ("datum_sql.sql", "datum_sql.plan", "datum_sql.catalog", "datum_sql.connectors", "datum_sql.engine.runtime"),
    "batch/": ("datum_sql.context", "datum_sql.notebook", "datum_sql.cli", "datum_sql.engine.runtime"),
    "connectors/": ("datum_sql.sql", "datum_sql.plan", "datum_sql.engine", "datum_sql.catalog", "datum_sql.context"),
    # the server sits above the Context (like the CLI): statements go through its methods
    "server/": ("datum_sql.cli", "datum_sql.notebook", "datum_sql.plan", "datum_sql.batch", "datum_sql.connectors", "datum_sql.engine.operators"),
}  # fmt: skip

#: Leaf modules a layer may import although its rule above bans the package.
ALLOWED: dict[str, tuple[str, ...]] = {
    "errors.py": ("datum_sql.redaction",),
    "extensions.py": ("datum_sql.errors",),
}

#: The notebook layer sits on top: it imports the Context and the query handle and attaches
#: its views to them (datum_sql/extensions.py); nothing below imports it, not even inside a
#: function. Only the package ``__init__`` (which runs the attaching) and the layer itself do.
TOP_LAYER = "datum_sql.notebook"
TOP_LAYER_IMPORTERS = ("notebook/", "__init__.py")

#: Optional dependencies live only in the modules that need them.
OPTIONAL = {
    "aiokafka": "connectors/kafka/",
    "IPython": "notebook/",
    "matplotlib": "notebook/",
    "polars": "notebook/",
    "google.protobuf": "server/",
}


def _imports(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """Every module ``path`` (under ``root``) imports, at module level or inside functions;
    relative imports resolved, ``from pkg import name`` counted as ``pkg.name`` too."""
    tree = ast.parse(path.read_text())
    package = list(path.relative_to(root).parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.append(module)
            out += [f"{module}.{a.name}" for a in node.names]
    return out


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_respects_its_layer(path: Path) -> None:
    rel = str(path.relative_to(PACKAGE))
    imports = _imports(path)
    for layer, banned in FORBIDDEN.items():
        if rel == layer or (layer.endswith("/") and rel.startswith(layer)):
            bad = [
                m for m in imports if _within(m, banned) and not _within(m, ALLOWED.get(rel, ()))
            ]
            assert not bad, f"{rel} ({layer}) must not import {bad}"
    if not rel.startswith(TOP_LAYER_IMPORTERS):
        up = [m for m in imports if _within(m, (TOP_LAYER,))]
        assert not up, f"{rel} must not import the notebook layer {up}: it attaches itself"
    for dep, home in OPTIONAL.items():
        if any(_within(m, (dep,)) for m in imports):
            assert rel.startswith(home), f"{rel} imports optional {dep}; only {home} may"


def test_the_rules_cover_every_layer() -> None:
    layers = {p.relative_to(PACKAGE).parts[0] for p in MODULES}
    assert {"catalog", "sql", "plan", "engine", "connectors", "batch"} <= layers


def test_the_import_scan_sees_relative_and_nested_imports(tmp_path: Path) -> None:
    # the rules above are only as good as this scan: a function-level or relative import
    # of the notebook layer must be seen
    assert "datum_sql.extensions.extension" in _imports(PACKAGE / "engine/runtime/query.py")
    probe = tmp_path / "datum_sql" / "engine" / "runtime" / "probe.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f():\n    from ...notebook import live\n    from . import query\n")
    found = _imports(probe, root=tmp_path)
    assert found == [
        "datum_sql.notebook", "datum_sql.notebook.live",
        "datum_sql.engine.runtime", "datum_sql.engine.runtime.query",
    ]  # fmt: skip


def test_importing_the_handle_and_the_context_attaches_the_notebook_views() -> None:
    # the handle's views work in a plain process although nothing below imports notebook/
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from datum_sql.context import Context\n"
        "from datum_sql.extensions import extension\n"
        "assert extension('query.show').__module__ == 'datum_sql.notebook.attach'\n"
        "assert extension('context.verify').__module__ == 'datum_sql.notebook.attach'\n"
        "heavy = sorted(m for m in sys.modules if m.startswith('datum_sql.notebook.')\n"
        "               and m != 'datum_sql.notebook.attach')\n"
        "print(heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        cwd=PACKAGE.parent, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


def test_an_extension_nobody_installed_fails_loudly() -> None:
    from datum_sql.errors import DatumError
    from datum_sql.extensions import extension

    with pytest.raises(DatumError, match=r"query\.nothing is provided by datum_sql\.notebook"):
        extension("query.nothing")
