"""Golden rule for the aggregates beyond count/sum/avg/min/max: DISTINCT forms, variance
and standard deviation, median and percentile_cont, bool_and/bool_or, bit_xor(DISTINCT),
and the ordered array_agg/string_agg, in tumble, hop and session windows and in an
unbounded GROUP BY (both emit modes), against DuckDB running the same aggregates as a batch.

Rows: a key with few values (and NULL), an int and a float column with NULLs (floats are
multiples of 1/4), event times on a half-second grid with many ties, and a unique ``id``
so that every ORDER BY inside an aggregate is total. Arrival: bounded disorder covered by
the watermark delay plus the allowed lateness (nothing is late), random batch sizes.
Floats are compared with a relative tolerance (the partials merge in another order than
DuckDB's single pass).
"""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, cut, duckdb_result

import datum_sql as ds

TS = pa.timestamp("us")
BASE_US = int(dt.datetime(2024, 1, 1, tzinfo=dt.UTC).timestamp()) * 1_000_000
HALF_S = 500_000
SCHEMA = pa.schema(
    [("id", pa.int64()), ("k", pa.string()), ("v", pa.int64()), ("x", pa.float64()), ("ts", TS)]
)

#: (streaming SQL, DuckDB SQL) of each aggregate, named.
AGGREGATES = {
    "dv": ("count(DISTINCT v)", "count(DISTINCT v)"),
    "sdv": ("sum(DISTINCT v)", "CAST(sum(DISTINCT v) AS BIGINT)"),
    "adx": ("avg(DISTINCT x)", "avg(DISTINCT x)"),
    "mdv": ("min(DISTINCT v)", "min(DISTINCT v)"),
    "xdx": ("max(DISTINCT x)", "max(DISTINCT x)"),
    "sx": ("stddev(x)", "stddev(x)"),
    "spv": ("stddev_pop(v)", "stddev_pop(v)"),
    "ssv": ("stddev_samp(v)", "stddev_samp(v)"),
    "vv": ("variance(v)", "variance(v)"),
    "vsx": ("var_samp(x)", "var_samp(x)"),
    "vpx": ("var_pop(x)", "var_pop(x)"),
    "mx": ("median(x)", "median(x)"),
    "pv": (
        "percentile_cont(0.25) WITHIN GROUP (ORDER BY v)",
        "percentile_cont(0.25) WITHIN GROUP (ORDER BY v)",
    ),
    "bxd": ("bit_xor(DISTINCT v)", "bit_xor(DISTINCT v)"),
    "ba": ("bool_and(v > 0)", "bool_and(v > 0)"),
    "bo": ("bool_or(x < 0)", "bool_or(x < 0)"),
    "av": ("array_agg(v ORDER BY ts, id)", "array_agg(v ORDER BY ts, id)"),
    "ax": (
        "array_agg(x ORDER BY v DESC NULLS LAST, id DESC)",
        "array_agg(x ORDER BY v DESC NULLS LAST, id DESC)",
    ),
    "sv": (
        "string_agg(CAST(v AS VARCHAR), ',' ORDER BY x NULLS FIRST, id)",
        "string_agg(CAST(v AS VARCHAR), ',' ORDER BY x NULLS FIRST, id)",
    ),
    "fv": (
        "sum(DISTINCT v) FILTER (WHERE x > 0)",
        "CAST(sum(DISTINCT v) FILTER (WHERE x > 0) AS BIGINT)",
    ),
    "fa": (
        "array_agg(id ORDER BY id) FILTER (WHERE v IS NOT NULL)",
        "array_agg(id ORDER BY id) FILTER (WHERE v IS NOT NULL)",
    ),
    "fs": ("stddev(v) FILTER (WHERE k IS NULL)", "stddev(v) FILTER (WHERE k IS NULL)"),
}
NAMES = sorted(AGGREGATES)


def agg_list(names: list[str], side: int) -> str:
    return ", ".join(f"{AGGREGATES[n][side]} AS {n}" for n in names)


def query(kind: str, names: list[str], emit: bool) -> tuple[str, str]:
    """(streaming SQL, DuckDB SQL) of ``names`` grouped by k over ``kind``."""
    ours, duck = agg_list(names, 0), agg_list(names, 1)
    close = " EMIT ON WINDOW CLOSE" if emit else ""
    if kind == "group_by":
        return f"SELECT k, {ours} FROM t GROUP BY k", f"SELECT k, {duck} FROM t GROUP BY k"
    if kind == "session":
        gap = 4_000_000
        stream = (
            f"SELECT k, window_start, window_end, {ours} FROM session(t, ts, INTERVAL '4 seconds') "
            f"GROUP BY window_start, window_end, k{close}"
        )
        batch = (
            f"SELECT k, make_timestamp(min(us)) AS window_start, make_timestamp(max(us) + {gap}) "
            f"AS window_end, {duck} FROM (SELECT *, sum(new) OVER (PARTITION BY k ORDER BY us, "
            "new DESC ROWS UNBOUNDED PRECEDING) AS sid FROM (SELECT *, epoch_us(ts) AS us, "
            "CASE WHEN epoch_us(ts) - lag(epoch_us(ts)) OVER (PARTITION BY k ORDER BY ts) "
            f"< {gap} THEN 0 ELSE 1 END AS new FROM t)) GROUP BY k, sid"
        )
        return stream, batch
    slide, size = (10, 10) if kind == "tumble" else (5, 15)
    table = (
        f"tumble(t, ts, INTERVAL '{size} seconds')"
        if kind == "tumble"
        else f"hop(t, ts, INTERVAL '{slide} seconds', INTERVAL '{size} seconds')"
    )
    stream = (
        f"SELECT k, window_start, window_end, {ours} FROM {table} "
        f"GROUP BY window_start, window_end, k{close}"
    )
    s_us, z_us = slide * 1_000_000, size * 1_000_000
    batch = (
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {z_us}) AS window_end, "
        f"{duck} FROM (SELECT *, (epoch_us(ts) // {s_us} - r.i) * {s_us} AS w "
        f"FROM t, range({size // slide}) r(i)) WHERE w + {z_us} > epoch_us(ts) GROUP BY w, k"
    )
    return stream, batch


# -- data -----------------------------------------------------------------------------------

row_st = st.tuples(
    st.sampled_from(["a", "a", "b", "c", None]),
    st.one_of(st.none(), st.integers(-6, 6)),
    st.one_of(st.none(), st.integers(-20, 20).map(lambda i: i / 4)),
    st.integers(0, 120),
)


def to_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(len(rows)), pa.int64()),
            "k": pa.array([r[0] for r in rows], pa.string()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "x": pa.array([r[2] for r in rows], pa.float64()),
            "ts": pa.array([BASE_US + r[3] * HALF_S for r in rows], pa.int64()).cast(TS),
        },
        schema=SCHEMA,
    )


def arrival(table: pa.Table, disorder: int, rnd: random.Random) -> pa.Table:
    """``table`` in an order where no row comes more than ``disorder`` ticks late."""
    ticks = [(t - BASE_US) // HALF_S for t in table.column("ts").cast(pa.int64()).to_pylist()]
    order = sorted(range(len(ticks)), key=lambda i: (ticks[i] + rnd.randint(0, disorder), i))
    return table.take(pa.array(order, pa.int64()))


# -- comparing ------------------------------------------------------------------------------


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def assert_close_rows(got: pa.Table, want: pa.Table) -> None:
    """Equal rows, matched on the group columns (unique per row), floats within 1e-9."""
    assert got.column_names == want.column_names, (got.column_names, want.column_names)
    keys = [c for c in ("k", "window_start", "window_end") if c in got.column_names]

    def by_key(table: pa.Table) -> dict[tuple, dict[str, Any]]:
        rows = table.to_pylist()
        out = {tuple(r[c] for c in keys): r for r in rows}
        assert len(out) == len(rows), "two result rows for one group"
        return out

    g, w = by_key(got), by_key(want)
    assert set(g) == set(w), (sorted(set(g) ^ set(w), key=repr), len(g), len(w))
    for key, row in w.items():
        for col, value in row.items():
            assert _close(g[key][col], value), (key, col, g[key][col], value)


def stream(sql: str, batches: list[pa.RecordBatch], delay_ticks: int) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow(
        "t",
        batches,
        schema=SCHEMA,
        event_time="ts",
        watermark=ds.BoundedOutOfOrderness(milliseconds=delay_ticks * HALF_S // 1000),
    )
    try:
        q = ctx.execute_streaming(sql)
        result = q.to_arrow(timeout=120)
        assert q.status()["late_rows"] == 0
        return result
    finally:
        ctx.close()


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    rows=st.lists(row_st, max_size=50),
    kind=st.sampled_from(["tumble", "hop", "session", "group_by"]),
    names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True),
    emit=st.booleans(),
    disorder=st.integers(0, 8),
    max_batch=st.integers(1, 10),
    rnd=st.randoms(use_true_random=False),
)
def test_aggregates_equal_duckdb(
    rows: list, kind: str, names: list[str], emit: bool, disorder: int, max_batch: int, rnd: Any
) -> None:
    """Every aggregate, several DISTINCT ones together, any batch sizes and disorder: the
    final result (EMIT ON WINDOW CLOSE rows, or the changelog applied) equals DuckDB's."""
    stream_sql, batch_sql = query(kind, names, emit and kind != "group_by")
    table = to_table(rows)
    got = stream(stream_sql, cut(arrival(table, disorder, rnd), rnd, max_batch), disorder)
    assert_close_rows(got, duckdb_result(batch_sql, {"t": table}))


def test_global_aggregate_over_no_rows_is_one_row_of_nulls() -> None:
    """Without GROUP BY keys, no input still gives the one row batch SQL gives."""
    names = ["dv", "sdv", "sx", "vpx", "ba", "av", "sv"]
    sql = f"SELECT {agg_list(names, 0)} FROM t"
    got = stream(sql, [pa.RecordBatch.from_pylist([], schema=SCHEMA)], 0)
    want = duckdb_result(f"SELECT {agg_list(names, 1)} FROM t", {"t": to_table([])})
    assert got.to_pylist() == want.to_pylist() == [{**dict.fromkeys(names), "dv": 0}]


RESTORE_CASES = {
    f"{kind}-{'emit' if emit else 'changelog'}": (kind, emit)
    for kind in ("tumble", "hop", "session", "group_by")
    for emit in (True, False)
    if not (emit and kind == "group_by")
}


@pytest.mark.parametrize("case", list(RESTORE_CASES))
def test_aggregates_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """All the aggregates at once over 300 disordered rows, checkpointed half-way, crashed
    at three quarters and resumed from the checkpoint in a new context: the sink (Parquet
    for EMIT ON WINDOW CLOSE, a DuckDB upsert for a changelog) ends holding DuckDB's
    result."""
    kind, emit = RESTORE_CASES[case]
    stream_sql, batch_sql = query(kind, NAMES, emit)
    rnd = random.Random(case)
    rows = [
        (rnd.choice(["a", "b", "c"] if not emit else ["a", "b", None]),
         rnd.choice([None, *range(-6, 7)]),
         rnd.randint(-20, 20) / 4 if rnd.random() > 0.1 else None,
         rnd.randint(0, 120))
        for _ in range(300)
    ]  # fmt: skip
    batches = cut(arrival(to_table(rows), 6, rnd), rnd, 12)
    keys = "k" if kind == "group_by" else "k, window_start"
    assert_restore_matches(
        stream_sql,
        batch_sql,
        {"t": batches},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=3 * HALF_S // 1000)},
        allowed_lateness=dt.timedelta(milliseconds=3 * HALF_S // 1000),
        sink="parquet" if emit else "duckdb",
        primary_key=None if emit else keys,
        same=assert_close_rows,
    )
