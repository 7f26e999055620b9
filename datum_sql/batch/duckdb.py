"""A batch query with an ASOF JOIN or a correlated NOT IN, which DataFusion cannot run,
run on DuckDB."""

from __future__ import annotations

import pyarrow as pa

from datum_sql.catalog import Catalog
from datum_sql.errors import PlanError
from datum_sql.plan.batch import batch_sql
from datum_sql.sql import statements as st


def run(
    query: st.Query, tables: dict[str, pa.Table], catalog: Catalog, max_windows_per_row: int
) -> pa.Table:
    import duckdb

    text = batch_sql(query, "duckdb", max_windows_per_row=max_windows_per_row)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for name in query.tables:
        con.register(catalog.require(name).name, tables[name.lower()])
    try:
        return con.sql(text).to_arrow_table()
    except duckdb.Error as exc:
        raise PlanError(f"batch query failed: {exc}") from None
    finally:
        con.close()
