"""The golden rule's oracle: DuckDB runs the same SQL as a batch over the same rows."""

from __future__ import annotations

import math
from typing import Any

import duckdb
import pyarrow as pa


def duckdb_result(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute("SET TimeZone = 'UTC'")
    for name, table in tables.items():
        con.register(name, table)
    return con.sql(sql).to_arrow_table()


def _norm(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return round(v, 6)
    return v


def rows(table: pa.Table, columns: list[str] | None = None) -> list[tuple[Any, ...]]:
    """The table as a sorted list of row tuples (column order as given), floats rounded."""
    cols = columns or table.column_names
    data = [table.column(c).to_pylist() for c in cols]
    out = [tuple(_norm(v) for v in row) for row in zip(*data, strict=True)]
    return sorted(
        out, key=lambda r: tuple((v is None, str(type(v)), v if v is not None else 0) for v in r)
    )


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names, (got.column_names, want.column_names)
    g, w = rows(got), rows(want)
    assert len(g) == len(w), f"{len(g)} rows streamed vs {len(w)} in batch"
    assert g == w
