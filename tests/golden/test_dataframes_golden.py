"""Golden rule for DataFrame inputs: random rows (nulls included) registered as a polars
DataFrame, a pandas DataFrame (nullable dtypes), a DuckDB relation or a dict of columns give,
streaming and batch, the same rows and column types as the same rows as a pyarrow Table."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_rows

import datum_sql as ds

SCHEMA = pa.schema(
    [("a", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("ts", pa.timestamp("us"))]
)

row = st.fixed_dictionaries(
    {
        "a": st.one_of(st.none(), st.integers(-100, 100)),
        "f": st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
        "s": st.one_of(st.none(), st.text("abcXYZ é", max_size=5)),
        "ts": st.one_of(st.none(), st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2030, 1, 1))),
    }
)


def _polars(table: pa.Table) -> Any:
    return pl.DataFrame(
        table.to_pylist(),
        schema={"a": pl.Int64, "f": pl.Float64, "s": pl.String, "ts": pl.Datetime("us")},
    )


def _pandas(table: pa.Table) -> Any:
    cols = table.to_pydict()
    return pd.DataFrame(
        {
            "a": pd.array(cols["a"], dtype="Int64"),
            "f": pd.array(cols["f"], dtype="Float64"),
            "s": pd.array(cols["s"], dtype="string"),
            "ts": pd.array(cols["ts"], dtype="datetime64[us]"),
        }
    )


def _duckdb(table: pa.Table) -> Any:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (a BIGINT, f DOUBLE, s VARCHAR, ts TIMESTAMP)")
    con.register("rows_in", table)
    con.execute("INSERT INTO t SELECT * FROM rows_in")
    con.unregister("rows_in")
    return con.table("t")


def _dict(table: pa.Table) -> Any:
    cols = table.to_pydict()
    cols["ts"] = pa.array(cols["ts"], pa.timestamp("us"))
    return cols


FRAMES: dict[str, Callable[[pa.Table], Any]] = {
    "polars": _polars,
    "polars_lazy": lambda t: _polars(t).lazy(),
    "pandas": _pandas,
    "duckdb_relation": _duckdb,
    "dict": _dict,
}

QUERIES = st.sampled_from(
    [
        "SELECT a, f * 2 AS f2, upper(s) AS up, ts FROM t WHERE a > 0 OR s LIKE 'a%'",
        "SELECT a + 1 AS a1, length(s) AS n, ts + INTERVAL '1 hour' AS later FROM t",
        "SELECT s, count(*) AS n, sum(a) AS total, min(f) AS lo, max(ts) AS last FROM t GROUP BY s",
        "SELECT a % 3 AS bucket, count(s) AS texts, avg(f) AS mean FROM t GROUP BY a % 3",
    ]
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.lists(row, min_size=1, max_size=40),
    sql=QUERIES,
    kind=st.sampled_from(sorted(FRAMES)),
    batch_size=st.integers(1, 15),
)
def test_a_dataframe_gives_what_the_same_pyarrow_table_gives(
    data: list[dict], sql: str, kind: str, batch_size: int
) -> None:
    table = pa.Table.from_pylist(data, schema=SCHEMA)
    want_ctx = ds.Context(state_dir=None)
    want_ctx.register_arrow("t", table, batch_size=batch_size)
    got_ctx = ds.Context(state_dir=None)
    # a dict of all-None lists tells no types: a dict is given its schema
    schema = SCHEMA if kind == "dict" else None
    got_ctx.register(name="t", data=FRAMES[kind](table), schema=schema, batch_size=batch_size)
    assert got_ctx.catalog.require("t").schema == SCHEMA

    want = want_ctx.sql(sql)
    batch = got_ctx.sql(sql)
    assert batch.schema == want.schema
    assert_same_rows(batch, want)

    want_streamed = want_ctx.execute_streaming(sql).to_arrow(timeout=60)
    streamed = got_ctx.execute_streaming(sql).to_arrow(timeout=60)
    assert streamed.schema == want_streamed.schema
    assert_same_rows(streamed, want_streamed)
    assert_same_rows(streamed, want)
