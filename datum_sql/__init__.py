"""datum-sql: a SQL-first streaming database in a Python package.

``import datum_sql`` loads only the errors and small types; the planner and runtime
(DataFusion, sqlglot) load on the first use of a name that needs them, such as
``datum_sql.Context``, once per process and never inside a running query.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

from datum_sql.errors import (
    CatalogError,
    CheckpointError,
    DatumError,
    PlanError,
    QueryFailed,
    SchemaError,
    SinkError,
    SourceError,
    SqlError,
)
from datum_sql.types import BoundedOutOfOrderness, Watermark

if TYPE_CHECKING:
    from datum_sql.context import Context, CsvSink, DuckDBSink, JsonlSink, ParquetSink
    from datum_sql.engine.runtime.query import StreamingQuery

__version__ = "0.1.0"  # the one version: pyproject.toml reads it ([tool.setuptools.dynamic])

#: Public names imported on first access, and the module that defines each.
_LAZY = {
    "Context": "datum_sql.context",
    "CsvSink": "datum_sql.context",
    "DuckDBSink": "datum_sql.context",
    "JsonlSink": "datum_sql.context",
    "ParquetSink": "datum_sql.context",
    "StreamingQuery": "datum_sql.engine.runtime.query",
    "udaf": "datum_sql.aggregate_functions",
    "udf": "datum_sql.functions",
    "process_function": "datum_sql.process",
    "ProcessResponse": "datum_sql.process",
    "ProcessLimits": "datum_sql.process",
    "Activation": "datum_sql.process",
    "table_function": "datum_sql.table_functions",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'datum_sql' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


# -- notebooks (datum_sql/notebook/) ---------------------------------------------------------
def load_ipython_extension(ipython: object) -> None:
    """``%load_ext datum_sql``: the ``%%sql`` magic and rich display in IPython/Jupyter."""
    from datum_sql.notebook.magic import load_ipython_extension as load

    load(ipython)


def _register_display() -> None:
    """Imported inside IPython/Jupyter: results, status and EXPLAIN render as HTML."""
    if "IPython" not in sys.modules:
        return
    from datum_sql.notebook.display import register_if_ipython

    register_if_ipython()


def _attach_notebook() -> None:
    """The notebook layer attaches the query handle's and the Context's views (show,
    explain, verify, ...; see datum_sql/extensions.py): they never import it."""
    from datum_sql.notebook.attach import install

    install()


_attach_notebook()
_register_display()

__all__ = [
    "BoundedOutOfOrderness",
    "CatalogError",
    "CheckpointError",
    "Context",
    "CsvSink",
    "DatumError",
    "DuckDBSink",
    "JsonlSink",
    "ParquetSink",
    "PlanError",
    "QueryFailed",
    "SchemaError",
    "SinkError",
    "SourceError",
    "SqlError",
    "StreamingQuery",
    "Watermark",
]
