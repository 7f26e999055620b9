"""datum-sql: a SQL-first streaming database in a Python package."""

from datum_sql.context import Context, CsvSink, DuckDBSink, JsonlSink, ParquetSink
from datum_sql.engine.runtime.query import StreamingQuery
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

__version__ = "0.1.0"


# -- notebooks (datum_sql/notebook/) ---------------------------------------------------------
def load_ipython_extension(ipython: object) -> None:
    """``%load_ext datum_sql``: the ``%%sql`` magic and rich display in IPython/Jupyter."""
    from datum_sql.notebook.magic import load_ipython_extension as load

    load(ipython)


def _register_display() -> None:
    """Imported inside IPython/Jupyter: results, status and EXPLAIN render as HTML."""
    from datum_sql.notebook.display import register_if_ipython

    register_if_ipython()


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
