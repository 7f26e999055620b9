"""Golden rule for GROUP BY GROUPING SETS / ROLLUP / CUBE and grouping(): the streaming
result, fed in random batches, equals ``ctx.sql``'s batch result of the same SQL.

Rows: a key ``k`` with few values and NULL (a grouped NULL must stay apart from the NULL
of a set that leaves ``k`` out), a small int ``j`` with NULL, an int ``v`` and an event
time ``ts`` (seconds, in order) for the windowed shapes.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import assert_restore_matches, cut

import datum_sql as ds

SCHEMA = pa.schema(
    [("k", pa.string()), ("j", pa.int64()), ("v", pa.int64()), ("ts", pa.timestamp("us"))]
)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TUMBLE = "tumble(t, ts, INTERVAL '10' SECOND)"
SHAPES = {
    "rollup": "SELECT k, j, grouping(k, j) AS g, count(*) AS n, sum(v) AS s FROM t "
    "GROUP BY ROLLUP(k, j)",
    "cube": "SELECT k, j, grouping(j, k) AS g, min(v) AS lo, max(v) AS hi FROM t "
    "GROUP BY CUBE(k, j)",
    "mixed-having": "SELECT k, j, grouping(j) AS g, count(*) AS n FROM t "
    "GROUP BY k, ROLLUP(j) HAVING count(*) > 1",
    "sets-repeated": "SELECT k, j, count(v) AS n FROM t GROUP BY GROUPING SETS ((k), (j), (k), ())",
    "distinct-filter": "SELECT k, count(DISTINCT v) AS d, sum(v) FILTER (WHERE j > 0) AS f "
    "FROM t GROUP BY ROLLUP(k)",
    "where": "SELECT j, grouping(j) AS g, avg(v) AS a FROM t WHERE v > 0 GROUP BY CUBE(j)",
    "windowed": "SELECT window_start, window_end, k, grouping(k) AS g, sum(v) AS s "
    f"FROM {TUMBLE} GROUP BY window_start, window_end, ROLLUP(k)",
    "windowed-cube": "SELECT window_end, k, j, count(*) AS n "
    f"FROM {TUMBLE} GROUP BY window_end, CUBE(k, j)",
    "hop-sets-on-close": "SELECT window_start, window_end, k, j, sum(v) AS s "
    "FROM hop(t, ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) "
    "GROUP BY window_start, window_end, GROUPING SETS ((k), (j), ()) EMIT ON WINDOW CLOSE",
    "top-n-of-rollup": "SELECT * FROM (SELECT k, n, g, ROW_NUMBER() OVER (ORDER BY n DESC, "
    "k NULLS FIRST, g) AS rn FROM (SELECT k, grouping(k) AS g, count(*) AS n FROM t "
    "GROUP BY ROLLUP(k)) AS q) AS r WHERE rn <= 2",
}
#: What the batch runs for a streaming-only clause.
EOWC = " EMIT ON WINDOW CLOSE"

row_st = st.tuples(
    st.sampled_from(["a", "b", "c", None]),
    st.one_of(st.none(), st.integers(0, 3)),
    st.integers(-5, 5),
    st.integers(0, 3),
)


def to_table(rows: list[tuple]) -> pa.Table:
    seconds, times = 0, []
    for r in rows:
        seconds += r[3]
        times.append(dt.datetime(2024, 1, 1) + dt.timedelta(seconds=seconds))
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.string()),
            "j": pa.array([r[1] for r in rows], pa.int64()),
            "v": pa.array([r[2] for r in rows], pa.int64()),
            "ts": pa.array(times, pa.timestamp("us")),
        },
        schema=SCHEMA,
    )


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def results(sql: str, batches: list[pa.RecordBatch]) -> tuple[pa.Table, pa.Table]:
    """(streaming, batch) results of ``sql`` over ``batches``."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", batches, schema=SCHEMA, event_time="ts")
    try:
        return ctx.execute_streaming(sql).to_arrow(timeout=120), ctx.sql(sql.replace(EOWC, ""))
    finally:
        ctx.close()


@SETTINGS
@given(
    data=st.lists(row_st, max_size=40),
    shape=st.sampled_from(sorted(SHAPES)),
    max_batch=st.integers(1, 8),
    rnd=st.randoms(use_true_random=False),
)
def test_grouping_sets_stream_like_batch(data: list, shape: str, max_batch: int, rnd: Any) -> None:
    streamed, batch = results(SHAPES[shape], cut(to_table(data), rnd, max_batch))
    assert streamed.column_names == batch.column_names
    assert rows(streamed) == rows(batch)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_has_rows_of_several_sets(shape: str) -> None:
    """Over a fixed input each shape gives rows, some with a key left out (NULL by the
    set, beside the rows whose key is NULL in the data)."""
    data = [("a", 1, 1, 0), (None, 1, 2, 1), ("a", None, 3, 4), ("b", 2, 4, 12), ("a", 1, 5, 1)]
    streamed, batch = results(SHAPES[shape], cut(to_table(data), random.Random(shape), 2))
    assert rows(streamed) == rows(batch)
    assert batch.num_rows > 0
    if "g" in batch.column_names and "rn" not in batch.column_names:
        assert len(set(batch.column("g").to_pylist())) > 1


def test_a_set_of_no_keys_has_its_row_over_no_rows() -> None:
    """As a global aggregate: ROLLUP's grand total over an empty input is one row."""
    streamed, batch = results(SHAPES["rollup"], cut(to_table([]), random.Random(0), 1))
    assert rows(streamed) == rows(batch) == [(None, None, 3, 0, None)]


def test_window_columns_must_be_in_every_set() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", to_table([("a", 1, 1, 0)]), event_time="ts")
    sql = f"SELECT window_start, k, sum(v) AS s FROM {TUMBLE} GROUP BY ROLLUP(window_start, k)"
    with pytest.raises(ds.PlanError, match="window columns in every grouping set"):
        ctx.execute_streaming(sql)


def test_grouping_sets_over_a_changelog_are_refused() -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", to_table([("a", 1, 1, 0)]), event_time="ts")
    sql = "SELECT n, count(*) AS c FROM (SELECT k, count(*) AS n FROM t GROUP BY k) GROUP BY ROLLUP(n)"
    with pytest.raises(ds.PlanError, match="over a changelog"):
        ctx.execute_streaming(sql)


def test_through_checkpoint_and_restore(tmp_path: Path) -> None:
    """300 rows in random batches, checkpointed half-way, crashed at three quarters and
    resumed: the upsert sink (keyed by the set's key and grouping()) ends holding DuckDB's
    batch result."""
    sql = (
        "SELECT coalesce(k, '-') AS key, grouping(k) AS g, count(*) AS n, sum(v) AS s, "
        "count(DISTINCT j) AS d FROM t GROUP BY ROLLUP(k)"
    )
    rnd = random.Random("restore")
    data = [(rnd.choice("abcde"), rnd.randint(0, 3), rnd.randint(-5, 5), 1) for _ in range(300)]
    assert_restore_matches(
        sql, sql, {"t": cut(to_table(data), rnd, 12)}, tmp_path / "state", primary_key="key, g"
    )
