"""datum-sql: a SQL-first streaming database in a Python package."""

from datum_sql.context import Context, CsvSink, DuckDBSink, JsonlSink, ParquetSink
from datum_sql.engine.runtime.query import StreamingQuery
from datum_sql.errors import (
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

__all__ = [
    "BoundedOutOfOrderness",
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
