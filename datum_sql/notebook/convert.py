"""Results to DataFrames.

``ctx.sql(...)`` returns a plain ``pyarrow.Table`` (it *is* the Arrow result, so there is
no ``to_arrow()`` step; ``.to_pandas()`` is pyarrow's own). pyarrow's Table type cannot be
extended and a subclass would break ``type(t) is pa.Table`` checks, so instead of a wrapper
these helpers take a Table, a RecordBatch or a query handle (its current result):

    to_polars(ctx.sql("SELECT ..."))     # == polars.from_arrow(table), zero-copy
    to_pandas(q)                         # a running or finished query's current result
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from datum_sql.optional import require

__all__ = ["to_arrow", "to_pandas", "to_polars"]


def to_arrow(obj: Any) -> pa.Table:
    """``obj`` as a ``pyarrow.Table``: a Table as is, a RecordBatch wrapped, a query
    handle's current result (``latest_state()``), anything with ``__arrow_c_stream__``."""
    if isinstance(obj, pa.Table):
        return obj
    if isinstance(obj, pa.RecordBatch):
        return pa.Table.from_batches([obj])
    if hasattr(obj, "latest_state") and hasattr(obj, "executor"):
        return obj.latest_state()
    if hasattr(obj, "__arrow_c_stream__"):
        return pa.table(obj)
    raise TypeError(f"cannot convert {type(obj).__name__} to an Arrow table")


def to_pandas(obj: Any) -> Any:
    """``obj`` (see :func:`to_arrow`) as a pandas DataFrame."""
    require("pandas", "to_pandas()")
    return to_arrow(obj).to_pandas()


def to_polars(obj: Any) -> Any:
    """``obj`` (see :func:`to_arrow`) as a polars DataFrame (zero-copy where possible)."""
    pl = require("polars", "to_polars()")
    return pl.from_arrow(to_arrow(obj))
