"""Output schemas of DataFusion SQL, found by planning it over empty inputs (no data moves)."""

from __future__ import annotations

import re

import datafusion
import pyarrow as pa

from datum_sql.errors import PlanError

_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def normalize_type(t: pa.DataType) -> pa.DataType:
    """The one Arrow type datum-sql uses in flight for what DataFusion may return."""
    return _VIEW_TYPES.get(t, t)


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, normalize_type(f.type), f.nullable) for f in schema])


def infer_schema(sql: str, inputs: dict[str, pa.Schema], *, context: str = "") -> pa.Schema:
    """The schema DataFusion gives ``sql`` over tables ``inputs``; PlanError if it can't plan it."""
    ctx = datafusion.SessionContext()
    for name, schema in inputs.items():
        ctx.register_record_batches(name, [[pa.RecordBatch.from_pylist([], schema=schema)]])
    try:
        out = ctx.sql(sql).schema()
    except Exception as exc:  # DataFusion raises plain Exception subclasses
        message = re.sub(r"\s+", " ", str(exc)).strip()
        message = message.replace("Error during planning: ", "")
        where = f" in {context}" if context else ""
        raise PlanError(f"cannot evaluate the expression{where}: {message}") from None
    names = out.names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise PlanError(f"the query returns column {dupes[0]!r} more than once; give each an alias")
    return normalize_schema(out)
