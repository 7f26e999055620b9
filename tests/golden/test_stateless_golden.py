"""Golden rule for stateless queries: streaming over random batches == DuckDB batch."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_same_rows, duckdb_result

import datum_sql as ds

SCHEMA = pa.schema(
    [
        ("a", pa.int64()),
        ("b", pa.int64()),
        ("f", pa.float64()),
        ("s", pa.string()),
        ("ts", pa.timestamp("us")),
    ]
)

row = st.fixed_dictionaries(
    {
        "a": st.one_of(st.none(), st.integers(-1000, 1000)),
        "b": st.one_of(st.none(), st.integers(-50, 50)),
        "f": st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
        "s": st.one_of(st.none(), st.text("abcXYZ ", max_size=6)),
        "ts": st.one_of(st.none(), st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2030, 1, 1))),
    }
)

PROJECTIONS = [
    "a", "b", "a + b AS ab", "a * 3 - b AS lin", "CAST(a AS DOUBLE) / 7 AS ratio", "f * 2 AS f2",
    "upper(s) AS up", "lower(s) AS low", "s || '!' AS bang", "length(s) AS len", "abs(a) AS absa",
    "coalesce(a, b, 0) AS co", "CASE WHEN a > b THEN 'gt' WHEN a = b THEN 'eq' ELSE 'le' END AS cmp",
    "a % 7 AS m7", "ts", "ts + INTERVAL '1 hour' AS later", "a IS NULL AS a_null",
    "greatest(a, b) AS g", "CAST(b AS VARCHAR) AS bs", "round(f, 2) AS rf",
]  # fmt: skip

PREDICATES = [
    "a > 10", "a <= b", "b BETWEEN -10 AND 10", "s LIKE 'a%'", "a IS NULL", "f > 0",
    "NOT (a > 0)", "s IN ('a', 'b', 'abc')", "ts >= TIMESTAMP '2025-01-01 00:00:00'",
    "a % 2 = 0 OR b < 0", "length(s) > 2 AND a > 0", "coalesce(b, 0) <> 3",
]  # fmt: skip


@st.composite
def queries(draw: st.DrawFn) -> str:
    cols = draw(st.lists(st.sampled_from(PROJECTIONS), min_size=1, max_size=5, unique=True))
    preds = draw(st.lists(st.sampled_from(PREDICATES), max_size=2, unique=True))
    where = f" WHERE {' AND '.join(f'({p})' for p in preds)}" if preds else ""
    return f"SELECT {', '.join(cols)} FROM t{where}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.lists(row, max_size=60),
    sql=queries(),
    batch_size=st.integers(1, 25),
)
def test_stateless_streaming_equals_duckdb(data: list[dict], sql: str, batch_size: int) -> None:
    table = pa.Table.from_pylist(data, schema=SCHEMA)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table, batch_size=batch_size)
    got = ctx.execute_streaming(sql).to_arrow(timeout=60)
    want = duckdb_result(sql, {"t": table})
    assert_same_rows(got, want)


@settings(max_examples=20, deadline=None)
@given(data=st.lists(row, max_size=40), sql=queries())
def test_batch_sql_equals_duckdb(data: list[dict], sql: str) -> None:
    """ctx.sql (DataFusion) agrees with DuckDB too: the two halves of the golden rule."""
    table = pa.Table.from_pylist(data, schema=SCHEMA)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table)
    assert_same_rows(ctx.sql(sql), duckdb_result(sql, {"t": table}))
