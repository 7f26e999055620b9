"""Golden rule for EMIT ON WINDOW CLOSE on queries without windows: the streamed rows are
DuckDB's rows of the same query, in DuckDB's ``ORDER BY`` event time, ties in arrival
order (``seq``, each row's arrival position). When each row is released is the operator's
unit test (tests/unit/operators/test_event_time_sort.py).

Rows as in test_topn_golden: few keys (and NULL), ints with NULLs, event times on a
half-second grid with many ties, bounded disorder within the watermark delay (plus the
allowed lateness), random batch sizes.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_restore_matches, duckdb_result
from test_topn_golden import HALF_S, SCHEMA, SETTINGS, arrival, cut, rows_st, to_table

import datum_sql as ds
from datum_sql.testing import sorted_rows

#: name -> (stream SQL, DuckDB SQL in event-time order, ties by arrival)
QUERIES = {
    "filter": (
        "SELECT k, v, ts, seq FROM t WHERE v IS NULL OR v > 2 EMIT ON WINDOW CLOSE",
        "SELECT k, v, ts, seq FROM t WHERE v IS NULL OR v > 2 ORDER BY ts, seq",
    ),
    "no-time-column": (
        "SELECT seq, upper(k) AS u FROM t EMIT ON WINDOW CLOSE",
        "SELECT seq, upper(k) AS u FROM t ORDER BY ts, seq",
    ),
    "derived-table": (
        "SELECT seq, w FROM (SELECT seq, v * 2 AS w FROM t WHERE k IS NOT NULL) AS d "
        "WHERE w >= 4 EMIT ON WINDOW CLOSE",
        "SELECT seq, w FROM (SELECT seq, ts, v * 2 AS w FROM t WHERE k IS NOT NULL) AS d "
        "WHERE w >= 4 ORDER BY ts, seq",
    ),
    "tumble-rows": (
        "SELECT seq, window_start FROM tumble(t, ts, INTERVAL '5 seconds') EMIT ON WINDOW CLOSE",
        "SELECT seq, make_timestamp(epoch_us(ts) // 5000000 * 5000000) AS window_start FROM t "
        "ORDER BY ts, seq",
    ),
}


@SETTINGS
@given(
    rows=rows_st,
    name=st.sampled_from(sorted(QUERIES)),
    delay=st.integers(0, 8),
    lateness=st.integers(0, 4),
    max_batch=st.integers(1, 15),
    rnd=st.randoms(use_true_random=False),
)
def test_rows_come_out_in_event_time_order(
    rows: list, name: str, delay: int, lateness: int, max_batch: int, rnd: random.Random
) -> None:
    stream_sql, batch_sql = QUERIES[name]
    table = to_table(arrival(rows, delay + lateness, rnd))
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", cut(table, rnd, max_batch), schema=SCHEMA, event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(milliseconds=delay * HALF_S // 1000))  # fmt: skip
    q = ctx.execute_streaming(
        stream_sql, allowed_lateness=dt.timedelta(milliseconds=lateness * HALF_S // 1000)
    )
    got = q.to_arrow(timeout=60)
    status = q.status()
    ctx.close()
    assert status["late_rows"] == 0
    want = duckdb_result(batch_sql, {"t": table})
    assert got.column_names == want.column_names
    assert got.to_pylist() == want.to_pylist()  # the same rows in the same order


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_sorted_rows_through_checkpoint_and_restore(name: str, tmp_path: Path) -> None:
    stream_sql, batch_sql = QUERIES[name]
    rnd = random.Random(name)
    rows = [(rnd.choice(["a", "b", None]), rnd.choice([None, *range(8)]), 0, rnd.randint(0, 240))
            for _ in range(300)]  # fmt: skip
    table = to_table(arrival(rows, 6, rnd))
    run = assert_restore_matches(
        stream_sql,
        batch_sql,
        {"t": cut(table, rnd, 12)},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=6 * HALF_S // 1000)},
        sink="parquet",
    )
    assert sorted_rows(run.result)
