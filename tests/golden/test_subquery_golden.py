"""Golden rule for subqueries in WHERE: ``[NOT] IN (SELECT ...)``, ``[NOT] EXISTS``
(correlated by equalities) and scalar subqueries over a bounded table, streamed, equal
DuckDB running the same SQL as a batch.

The stream ``s`` has event time with bounded disorder (at most 2 s, the watermark's
delay) and is cut into random batch sizes; the bounded table ``t`` has no event time.
Both sides have NULLs and duplicate keys; the subquery's filter may leave it empty.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result

import datum_sql as ds

TS = pa.timestamp("us")
BASE = dt.datetime(2024, 1, 1)
DELAY = ds.BoundedOutOfOrderness(seconds=2)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

key = st.sampled_from([1, 1, 2, 3, 4, None])
value = st.sampled_from([0, 3, 5, 8, None])
stream_rows = st.lists(st.tuples(key, value, st.integers(0, 2)), max_size=40)
table_rows = st.lists(st.tuples(key, value), max_size=10)

#: name -> SQL, each over s(k, v, ts) and t(k, x); the same text runs in DuckDB.
SHAPES = {
    "in": "SELECT k, v, ts FROM s WHERE k IN (SELECT k FROM t)",
    "in_filtered": "SELECT k, v, ts FROM s WHERE k IN (SELECT k FROM t WHERE x > 4)",
    "not_in": "SELECT k, v, ts FROM s WHERE k NOT IN (SELECT k FROM t)",
    "not_in_filtered": "SELECT k, v, ts FROM s WHERE k NOT IN (SELECT k FROM t WHERE x > 4)",
    "not_in_no_nulls": (
        "SELECT k, v, ts FROM s WHERE k NOT IN (SELECT k FROM t WHERE k IS NOT NULL)"
    ),
    "in_expression": "SELECT k, v, ts FROM s WHERE k + 1 IN (SELECT x FROM t)",
    "exists": ("SELECT k, v, ts FROM s WHERE EXISTS (SELECT 1 FROM t WHERE t.k = s.k AND t.x > 3)"),
    "not_exists": (
        "SELECT k, v, ts FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.k = s.k AND t.x > 3)"
    ),
    "exists_residual": (
        "SELECT k, v, ts FROM s WHERE EXISTS (SELECT 1 FROM t WHERE t.k = s.k AND t.x > s.v)"
    ),
    "not_exists_residual": (
        "SELECT k, v, ts FROM s WHERE NOT EXISTS "
        "(SELECT 1 FROM t WHERE t.k = s.k AND (t.x < s.v OR s.v IS NULL) AND t.x > 1)"
    ),
    "exists_uncorrelated": "SELECT k, v, ts FROM s WHERE EXISTS (SELECT 1 FROM t WHERE x > 6)",
    "exists_two_keys": (
        "SELECT k, v, ts FROM s WHERE EXISTS (SELECT 1 FROM t WHERE s.k = t.k AND s.v = t.x)"
    ),
    "in_correlated": "SELECT k, v, ts FROM s WHERE v IN (SELECT x FROM t WHERE t.k = s.k)",
    "not_in_correlated": (
        "SELECT k, v, ts FROM s WHERE v NOT IN (SELECT x FROM t WHERE t.k = s.k)"
    ),
    "in_or": "SELECT k, v, ts FROM s WHERE v > 5 OR k IN (SELECT k FROM t WHERE x < 5)",
    "in_distinct": "SELECT k, v, ts FROM s WHERE k IN (SELECT DISTINCT k FROM t)",
    "in_having": (
        "SELECT k, v, ts FROM s WHERE k IN (SELECT k FROM t GROUP BY k HAVING count(*) > 1)"
    ),
    "scalar_avg": "SELECT k, v, ts FROM s WHERE v > (SELECT avg(x) FROM t)",
    "scalar_count": "SELECT k, v, ts FROM s WHERE v >= (SELECT count(*) FROM t WHERE x > 4)",
    "two_subqueries": (
        "SELECT k, v, ts FROM s WHERE k IN (SELECT k FROM t) "
        "AND v NOT IN (SELECT x FROM t WHERE x IS NOT NULL)"
    ),
    "aggregate_over": (
        "SELECT k, count(*) AS n, sum(v) AS total FROM s "
        "WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.k = s.k) GROUP BY k"
    ),
    "window_over": (
        "SELECT window_start, window_end, count(*) AS n FROM tumble(s, ts, INTERVAL '5' SECOND) "
        "WHERE k IN (SELECT k FROM t) GROUP BY window_start, window_end"
    ),
    "join_then_in": (
        "SELECT s.k, s.v, u.x FROM s JOIN t u ON s.k = u.k WHERE s.v IN (SELECT x FROM t)"
    ),
}
#: DuckDB spells the window table function as its definition.
DUCKDB = {
    "window_over": (
        "SELECT time_bucket(INTERVAL 5 SECOND, ts) AS window_start, "
        "time_bucket(INTERVAL 5 SECOND, ts) + INTERVAL 5 SECOND AS window_end, count(*) AS n "
        "FROM s WHERE k IN (SELECT k FROM t) GROUP BY 1, 2"
    ),
}


def stream_table(rows: list[tuple]) -> pa.Table:
    """Row ``i`` at second ``i + jitter`` (jitter 0-2 s): disorder within the watermark."""
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "ts": pa.array([BASE + dt.timedelta(seconds=i + r[2]) for i, r in enumerate(rows)], TS),
        }
    )


def lookup_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "x": pa.array([r[1] for r in rows], pa.int64()),
        }
    )


def streamed(sql: str, s: pa.Table, t: pa.Table, size: int) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("s", s, event_time="ts", watermark=DELAY, batch_size=size)
    ctx.register_arrow("t", t)
    return ctx.execute_streaming(sql).to_arrow(timeout=60)


@SETTINGS
@given(
    rows=stream_rows,
    table=table_rows,
    size=st.integers(1, 9),
    shape=st.sampled_from(sorted(SHAPES)),
)
def test_subqueries_equal_duckdb(rows: list, table: list, size: int, shape: str) -> None:
    s, t = stream_table(rows), lookup_table(table)
    got = streamed(SHAPES[shape], s, t, size)
    assert_same_rows(got, duckdb_result(DUCKDB.get(shape, SHAPES[shape]), {"s": s, "t": t}))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_equals_duckdb_and_batch(shape: str) -> None:
    """A fixed input with NULLs and duplicates on both sides: streaming, DuckDB and
    ``ctx.sql`` agree, for every shape (hypothesis samples them above)."""
    rnd = random.Random(shape)
    rows = [
        (rnd.choice([1, 2, 3, None]), rnd.choice([0, 3, 5, None]), rnd.randint(0, 2))
        for _ in range(60)
    ]
    s = stream_table(rows)
    t = lookup_table([(1, 5), (1, 5), (3, None), (None, 3), (2, 8), (4, 0)])
    got = streamed(SHAPES[shape], s, t, 7)
    want = duckdb_result(DUCKDB.get(shape, SHAPES[shape]), {"s": s, "t": t})
    assert_same_rows(got, want)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("s", s, event_time="ts", watermark=DELAY)
    ctx.register_arrow("t", t)
    assert_same_rows(ctx.sql(SHAPES[shape]), want)


def test_semi_join_keeps_each_row_once() -> None:
    """Duplicates in the subquery never duplicate a row; duplicate stream rows all stay."""
    s = stream_table([(1, 5, 0), (1, 5, 0), (2, 3, 0)])
    t = lookup_table([(1, 0), (1, 0), (1, 0)])
    got = streamed(SHAPES["in"], s, t, 1)
    assert got.column("k").to_pylist() == [1, 1]


def test_not_in_with_a_null_in_the_subquery_matches_nothing() -> None:
    s = stream_table([(1, 5, 0), (2, 3, 0), (None, 3, 0)])
    t = lookup_table([(1, 0), (None, 0)])
    assert streamed(SHAPES["not_in"], s, t, 2).num_rows == 0
    # without the NULL, a NULL probe still matches nothing; an empty subquery keeps all
    assert streamed(SHAPES["not_in"], s, lookup_table([(1, 0)]), 2).column("k").to_pylist() == [2]
    assert streamed(SHAPES["not_in"], s, lookup_table([]), 2).num_rows == 3


RESTORE_SHAPES = [
    "in", "not_in", "exists", "not_exists", "exists_residual", "not_exists_residual", "in_correlated", "not_in_correlated",
    "in_having", "scalar_count", "join_then_in",
]  # fmt: skip


@pytest.mark.parametrize("shape", RESTORE_SHAPES)
def test_subqueries_through_checkpoint_and_restore(shape: str, tmp_path: Path) -> None:
    """The stream is checkpointed half-way, crashed at three quarters and resumed; the
    table is read whole by both runs. The sink ends holding DuckDB's result."""
    rnd = random.Random(f"restore-{shape}")
    rows = [
        (rnd.choice([1, 2, 3, None]), rnd.choice([0, 3, 5, None]), rnd.randint(0, 2))
        for _ in range(120)
    ]
    s = stream_table(rows)
    t = lookup_table([(1, 5), (1, 5), (3, None), (None, 3), (2, 8), (3, 0)])
    assert_restore_matches(
        SHAPES[shape],
        SHAPES[shape],
        {"s": s.to_batches(max_chunksize=rnd.randint(3, 9)), "t": t.to_batches()},
        tmp_path / "state",
        hold=["s"],
        event_time={"s": "ts"},
        watermark={"s": DELAY},
        sink="parquet",
    )


def test_windowed_aggregate_over_a_semi_join_through_restore(tmp_path: Path) -> None:
    """EMIT ON WINDOW CLOSE over the rows IN a bounded table: final rows, one per window."""
    rnd = random.Random("window")
    rows = [
        (rnd.choice([1, 2, 3, None]), rnd.choice([0, 3, 5, None]), rnd.randint(0, 2))
        for _ in range(120)
    ]
    s = stream_table(rows)
    t = lookup_table([(1, 5), (3, None), (None, 3)])
    sql = SHAPES["window_over"] + " EMIT ON WINDOW CLOSE"
    assert_restore_matches(
        sql,
        DUCKDB["window_over"],
        {"s": s.to_batches(max_chunksize=5), "t": t.to_batches()},
        tmp_path / "state",
        hold=["s"],
        event_time={"s": "ts"},
        watermark={"s": DELAY},
        sink="parquet",
    )


def test_a_materialized_view_is_a_stream_for_a_subquery_query() -> None:
    """A materialized view over the stream, read by a streaming query with an IN subquery
    and by the batch query: both equal DuckDB over the view's definition."""
    rnd = random.Random("view")
    rows = [(rnd.choice([1, 2, 3, None]), rnd.choice([0, 3, 5, None]), 0) for _ in range(50)]
    s, t = stream_table(rows), lookup_table([(1, 0), (3, 0), (None, 0)])
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("s", s, event_time="ts", watermark=DELAY, batch_size=4)
    ctx.register_arrow("t", t)
    ctx.execute("CREATE MATERIALIZED VIEW kept AS SELECT k, v, ts FROM s WHERE v IS NOT NULL")
    sql = "SELECT k, v FROM kept WHERE k NOT IN (SELECT k FROM t WHERE k IS NOT NULL)"
    want = duckdb_result(
        "SELECT k, v FROM (SELECT k, v, ts FROM s WHERE v IS NOT NULL) AS kept "
        "WHERE k NOT IN (SELECT k FROM t WHERE k IS NOT NULL)",
        {"s": s, "t": t},
    )
    assert want.num_rows > 0
    assert_same_rows(ctx.execute_streaming(sql).to_arrow(timeout=60), want)
    ctx.view("kept").wait(60)
    assert_same_rows(ctx.sql(sql), want)


def test_a_scalar_subquery_of_many_rows_fails_the_query() -> None:
    s, t = stream_table([(1, 5, 0)]), lookup_table([(1, 5), (2, 3)])
    with pytest.raises(ds.QueryFailed, match="a scalar subquery returned 2 rows"):
        streamed("SELECT k FROM s WHERE v > (SELECT x FROM t)", s, t, 1)
