"""The golden rule's oracle: DuckDB runs the same SQL as a batch over the same rows."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from datum_sql.testing import sorted_rows


def duckdb_result(sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute("SET TimeZone = 'UTC'")
    for name, table in tables.items():
        con.register(name, table)
    return con.sql(sql).to_arrow_table()


def assert_same_rows(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names, (got.column_names, want.column_names)
    g, w = sorted_rows(got), sorted_rows(want)
    assert len(g) == len(w), f"{len(g)} rows streamed vs {len(w)} in batch"
    assert g == w
