"""Golden rule for ``FILTER (WHERE ...)`` on aggregates and ``GROUP BY`` positions: windowed
and unbounded, the streamed result equals DuckDB's, and so does ``ctx.sql`` on the same SQL.
Data, arrival order and batching as in test_windows_golden.py."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_same_rows
from test_windows_golden import SETTINGS, arrival, cut, duck, rows_st, run, to_table

import datum_sql as ds

FILTERED = (
    "count(*) FILTER (WHERE v > 0) AS pos, count(v) FILTER (WHERE x < 0) AS cv, "
    "sum(x) FILTER (WHERE k <> 'a') AS sx, min(v) FILTER (WHERE x IS NOT NULL) AS mn, "
    "max(x) FILTER (WHERE v % 2 = 0) AS mx, count(DISTINCT v) FILTER (WHERE x > 0) AS dv, "
    "avg(x) FILTER (WHERE v BETWEEN -10 AND 10) AS ax, count(*) AS n"
)


def tumble(size_s: int, emit: bool) -> tuple[str, str]:
    size = size_s * 1_000_000
    stream = (
        f"SELECT k, window_start, window_end, {FILTERED} FROM tumble(t, ts, "
        f"INTERVAL '{size_s} seconds') GROUP BY 2, 3, 1" + (" EMIT ON WINDOW CLOSE" if emit else "")
    )
    batch = (
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {size}) AS window_end, "
        f"{FILTERED} FROM (SELECT *, epoch_us(ts) // {size} * {size} AS w FROM t) GROUP BY w, k"
    )
    return stream, batch


def hop(slide_s: int, size_s: int, emit: bool) -> tuple[str, str]:
    slide, size = slide_s * 1_000_000, size_s * 1_000_000
    stream = (
        f"SELECT window_start, window_end, {FILTERED} FROM hop(t, ts, INTERVAL '{slide_s} seconds', "
        f"INTERVAL '{size_s} seconds') GROUP BY window_start, window_end"
        + (" EMIT ON WINDOW CLOSE" if emit else "")
    )
    batch = (
        f"SELECT make_timestamp(w) AS window_start, make_timestamp(w + {size}) AS window_end, "
        f"{FILTERED} FROM (SELECT *, (epoch_us(ts) // {slide} - r.i) * {slide} AS w "
        f"FROM t, range({size // slide + 1}) r(i)) WHERE w + {size} > epoch_us(ts) GROUP BY w"
    )
    return stream, batch


#: Unbounded GROUP BY: the same SQL runs in DuckDB.
GROUPED = [
    f"SELECT k, {FILTERED} FROM t GROUP BY 1",
    f"SELECT v % 3 AS m, k IS NULL AS no_key, {FILTERED} FROM t GROUP BY 1, 2",
    f"SELECT {FILTERED} FROM t",
]


def query(kind: int, emit: bool) -> tuple[str, str]:
    """(streaming SQL, DuckDB SQL) for a tumble, a hop or one of GROUPED (never emitting on
    window close: they have no window)."""
    if kind == 0:
        return tumble(10, emit)
    if kind == 1:
        return hop(5, 15, emit)
    return GROUPED[kind - 2], GROUPED[kind - 2]


@SETTINGS
@given(
    rows=rows_st,
    kind=st.integers(0, 1 + len(GROUPED)),
    emit=st.booleans(),
    disorder=st.integers(0, 20),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_filtered_aggregates_and_group_by_positions_equal_duckdb(
    rows: list, kind: int, emit: bool, disorder: int, max_batch: int, rnd: random.Random
) -> None:
    stream_sql, duck_sql = query(kind, emit)
    table = to_table(arrival(rows, disorder, rnd))
    want = duck(duck_sql, table)
    got, late, status = run(stream_sql, cut(table, rnd, max_batch), disorder)
    assert late is None and status["late_rows"] == 0
    assert_same_rows(got, want)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table)
    assert_same_rows(ctx.sql(stream_sql.replace(" EMIT ON WINDOW CLOSE", "")), want)
