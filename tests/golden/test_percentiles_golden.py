"""Golden rule for the exact percentiles and ``bit_xor(DISTINCT x)``: the streaming final
result equals ``ctx.sql``'s bit for bit (both interpolate with datum_sql/engine/percentile.py,
both xor with datum_sql/engine/xor_distinct.py), and DuckDB's within float rounding.

Rows: a key with few values (and NULL), an int column with many ties and NULLs, a float
column with ties, NULLs, NaN and infinities on request, a decimal column; every spelling
of the percentile (median, approx_median, percentile_cont in both forms, quantile_cont,
approx_percentile, approx_percentile_cont) with q at 0, 1 and between, with FILTER, in a
GROUP BY (a changelog) and in tumble windows, and over a changelog (an aggregate of an
aggregate, whose rows retract).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import cut, duckdb_result

import datum_sql as ds

TS = pa.timestamp("us")
BASE_US = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()) * 1_000_000
SCHEMA = pa.schema(
    [("k", pa.string()), ("v", pa.int64()), ("x", pa.float64()), ("d", pa.decimal128(12, 3)),
     ("u", pa.uint8()), ("ts", TS)]
)  # fmt: skip

#: name -> (datum-sql spelling, DuckDB spelling)
CALLS = {
    "mv": ("median(v)", "median(v)"),
    "amx": ("approx_median(x)", "median(x)"),
    "p0": ("percentile_cont(0) WITHIN GROUP (ORDER BY v)", "quantile_cont(v, 0)"),
    "p1": ("percentile_cont(x, 1)", "quantile_cont(x, 1)"),
    "p3": ("percentile_cont(0.3) WITHIN GROUP (ORDER BY x)", "quantile_cont(x, 0.3)"),
    "q7": ("quantile_cont(v, 0.7)", "quantile_cont(v, 0.7)"),
    "a9": ("approx_percentile(x, 0.9)", "quantile_cont(x, 0.9)"),
    "ac": ("approx_percentile_cont(d, 0.35)", "quantile_cont(CAST(d AS DOUBLE), 0.35)"),
    "au": ("approx_percentile_cont(0.6) WITHIN GROUP (ORDER BY u)", "quantile_cont(u, 0.6)"),
    "fm": ("median(x) FILTER (WHERE v > 0)", "median(x) FILTER (WHERE v > 0)"),
    "bx": ("bit_xor(DISTINCT v)", "bit_xor(DISTINCT v)"),
    "bu": ("bit_xor(DISTINCT u)", "bit_xor(DISTINCT u)"),
    "bf": ("bit_xor(DISTINCT v) FILTER (WHERE x > 0)", "bit_xor(DISTINCT v) FILTER (WHERE x > 0)"),
    "ba": ("bit_and(DISTINCT v)", "bit_and(DISTINCT v)"),
    "bo": ("bit_or(DISTINCT u)", "bit_or(DISTINCT u)"),
    "n": ("count(*)", "count(*)"),
}
NAMES = sorted(CALLS)


def query(kind: str, names: list[str]) -> tuple[str, str]:
    ours = ", ".join(f"{CALLS[n][0]} AS {n}" for n in names)
    duck = ", ".join(f"{CALLS[n][1]} AS {n}" for n in names)
    if kind == "group_by":
        return f"SELECT k, {ours} FROM t GROUP BY k", f"SELECT k, {duck} FROM t GROUP BY k"
    stream = (
        f"SELECT k, window_start, {ours} FROM tumble(t, ts, INTERVAL '10 seconds') "
        "GROUP BY window_start, window_end, k"
    )
    batch = (
        f"SELECT k, make_timestamp(epoch_us(ts) // 10000000 * 10000000) AS window_start, {duck} "
        "FROM t GROUP BY epoch_us(ts) // 10000000, k"
    )
    return stream, batch


FLOATS = st.one_of(st.none(), st.integers(-12, 12).map(lambda i: i / 4))
SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0])
row_st = st.tuples(
    st.sampled_from(["a", "a", "b", None]),
    st.one_of(st.none(), st.integers(-3, 3)),
    FLOATS,
    st.one_of(st.none(), st.integers(-5000, 5000)),
    st.one_of(st.none(), st.integers(0, 255)),
    st.integers(0, 40),
)


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": [r[0] for r in rows],
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "x": pa.array([r[2] for r in rows], pa.float64()),
            "d": pa.array(
                [None if r[3] is None else decimal.Decimal(r[3]).scaleb(-3) for r in rows],
                pa.decimal128(12, 3),
            ),
            "u": pa.array([r[4] for r in rows], pa.uint8()),
            "ts": pa.array([BASE_US + r[5] * 500_000 for r in rows], pa.int64()).cast(TS),
        },
        schema=SCHEMA,
    )


def keyed(table: pa.Table) -> dict[tuple, dict[str, Any]]:
    rows = table.to_pylist()
    keys = [c for c in ("k", "window_start") if c in table.column_names]
    out = {tuple(r[c] for c in keys): r for r in rows}
    assert len(out) == len(rows), "two result rows for one group"
    return out


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (bit for bit otherwise: 0.0 == -0.0 as in SQL)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and not (math.isnan(a) or math.isinf(a)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    return same(a, b)


def run_both(
    sql: str, table: pa.Table, rnd: random.Random, max_batch: int
) -> tuple[pa.Table, pa.Table]:
    """(the streamed final result, ctx.sql's) of ``sql`` over ``table``."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", cut(table, rnd, max_batch), schema=SCHEMA, event_time="ts")
    try:
        return ctx.execute_streaming(sql).to_arrow(timeout=120), ctx.sql(sql)
    finally:
        ctx.close()


def check(table: pa.Table, kind: str, names: list[str], rnd: random.Random, max_batch: int) -> None:
    stream_sql, duck_sql = query(kind, names)
    streamed, batch = run_both(stream_sql, table, rnd, max_batch)
    assert streamed.schema.names == batch.schema.names
    assert streamed.schema.types == batch.schema.types, (streamed.schema, batch.schema)
    got, want, duck = keyed(streamed), keyed(batch), keyed(duckdb_result(duck_sql, {"t": table}))
    assert set(got) == set(want) == set(duck)
    for key, row in want.items():
        for col, value in row.items():
            assert same(got[key][col], value), ("stream vs ctx.sql", key, col, got[key][col], value)
            assert close(value, duck[key][col]), (
                "ctx.sql vs DuckDB",
                key,
                col,
                value,
                duck[key][col],
            )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(row_st, max_size=40),
    kind=st.sampled_from(["group_by", "tumble"]),
    names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True),
    max_batch=st.integers(1, 8),
    rnd=st.randoms(use_true_random=False),
)
def test_percentiles_and_xor_distinct_equal_batch(
    rows: list, kind: str, names: list[str], max_batch: int, rnd: Any
) -> None:
    """Any of the calls together (bit_xor(DISTINCT) beside others, which DataFusion's own
    fails on), NULLs, ties and empty groups, any batch sizes: streaming == ctx.sql."""
    check(to_table(rows), kind, names, rnd, max_batch)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(row_st, max_size=30),
    special=st.lists(SPECIAL, min_size=1, max_size=4),
    rnd=st.randoms(use_true_random=False),
)
def test_percentiles_of_nan_infinity_and_signed_zero(
    rows: list, special: list[float], rnd: Any
) -> None:
    """NaN sorts after every number, infinities interpolate as IEEE says, -0.0 is 0.0:
    the same in both paths (DuckDB's NaN handling agrees too)."""
    extra = [("a", 1, s, None, None, 3) for s in special]
    names = ["amx", "p1", "p3", "a9", "fm"]
    check(to_table(rows + extra), "group_by", names, rnd, 5)


def test_percentile_over_a_changelog() -> None:
    """The percentile of per-key sums, which change (retract) as rows arrive."""
    rnd = random.Random(7)
    rows = [(rnd.choice("abcdef"), rnd.randint(-5, 5), None, None, None, i) for i in range(200)]
    sql = (
        "SELECT n, median(s) AS m, percentile_cont(0.25) WITHIN GROUP (ORDER BY s) AS p, "
        "bit_xor(DISTINCT s) AS b FROM (SELECT k, count(*) % 3 AS n, sum(v) AS s FROM t "
        "GROUP BY k) GROUP BY n"
    )
    streamed, batch = run_both(sql, to_table(rows), rnd, 7)
    assert streamed.schema.types == batch.schema.types
    assert sorted(streamed.to_pylist(), key=repr) == sorted(batch.to_pylist(), key=repr)
    assert len(batch) == 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("approx_percentile_cont_with_weight(x, v, 0.5)", "approx_percentile_cont_with_weight()"),
        ("percentile_cont(x, 1.5)", "the percentile must be in [0, 1], got 1.5"),
        ("percentile_cont(x, v)", "needs a literal q between 0 and 1"),
        ("percentile_cont(0.5) WITHIN GROUP (ORDER BY x DESC)", "takes one ascending ORDER BY"),
        ("median(k)", "no function percentile_cont(VARCHAR, DOUBLE)"),
    ],
)
def test_refused_alike_in_both(call: str, message: str) -> None:
    """What one path refuses the other refuses, with the same message."""
    sql = f"SELECT k, {call} AS p FROM t GROUP BY k"
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", to_table([("a", 1, 1.0, 1, 1, 0)]), event_time="ts")
    with pytest.raises(ds.PlanError) as batch:
        ctx.sql(sql)
    with pytest.raises(ds.PlanError) as streamed:
        ctx.execute_streaming(sql)
    assert str(batch.value) == str(streamed.value)
    assert message in str(batch.value)
