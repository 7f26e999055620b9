"""Golden rule for over-window aggregates: ``agg(x) OVER (PARTITION BY k ORDER BY ts <frame>)``
streamed (each row once the watermark passes its time) equals DuckDB running the same
window functions as a batch.

A ROWS frame orders rows with equal times by arrival: every row carries ``seq``, its
arrival position, and DuckDB orders by ``ts, seq`` (the streaming query orders by ``ts``
alone), so both sides are deterministic with many ties. A RANGE frame treats equal times
as peers, so DuckDB orders by ``ts`` alone; first_value/last_value, which pick one peer,
stay with ROWS frames. Rows: a key with few values and NULL, an int with NULLs, a float
in quarters (sums exact either way), event times on a half-second grid with many ties;
arrival is bounded disorder within the watermark delay, so nothing is late; batches have
random sizes.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows, duckdb_result
from test_topn_golden import HALF_S, SCHEMA, SETTINGS, arrival, cut, rows_st, to_table

import datum_sql as ds

ROWS_CALLS = (
    "count(*) OVER w AS n, count(v) OVER w AS nv, sum(v) OVER w AS sv, avg(x) OVER w AS ax, "
    "min(v) OVER w AS lo, max(x) OVER w AS hi, first_value(v) OVER w AS fv, "
    "last_value(x) OVER w AS lx"
)
RANGE_CALLS = (
    "count(*) OVER w AS n, sum(x) OVER w AS sx, avg(v) OVER w AS av, min(x) OVER w AS lo, "
    "max(v) OVER w AS hi"
)


def over(calls: str, select: str, frame: str, *, ties_by_seq: bool, where: str = "",
         partition: str = "PARTITION BY k ") -> tuple[str, str]:  # fmt: skip
    """(streaming, DuckDB) SQL of ``select, calls`` over window ``w``, spelled inline."""
    stream_w = f"({partition}ORDER BY ts {frame})"
    duck_w = f"({partition}ORDER BY ts{', seq' if ties_by_seq else ''} {frame})"
    tail = f" FROM t{' WHERE ' + where if where else ''}"
    return (
        f"SELECT {select}, {calls.replace('OVER w', 'OVER ' + stream_w)}{tail}",
        f"SELECT {select}, {calls.replace('OVER w', 'OVER ' + duck_w)}{tail}",
    )


QUERIES = {
    "rows-3-preceding": over(ROWS_CALLS, "k, v, seq", "ROWS BETWEEN 3 PRECEDING AND CURRENT ROW",
                             ties_by_seq=True),
    "rows-0-preceding": over(ROWS_CALLS, "k, seq", "ROWS BETWEEN CURRENT ROW AND CURRENT ROW",
                             ties_by_seq=True),
    "rows-unbounded": over(ROWS_CALLS + ", row_number() OVER w AS rn, lag(v, 2, -1) OVER w AS l2",
                           "k, v, seq", "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                           ties_by_seq=True),
    "rows-global-filtered": over(
        "sum(v) OVER w AS sv, max(v) OVER w AS hi, lag(x) OVER w AS lx", "seq, v * 2 AS v2",
        "ROWS 5 PRECEDING", ties_by_seq=True, where="v IS NOT NULL AND v > 1", partition=""),
    "range-2s": over(RANGE_CALLS, "k, x, seq",
                     "RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW",
                     ties_by_seq=False),
    "range-current-row": over(RANGE_CALLS, "k, seq", "RANGE BETWEEN CURRENT ROW AND CURRENT ROW",
                              ties_by_seq=False),
    # SQL's default frame with ORDER BY: RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    "range-unbounded-default": over(RANGE_CALLS, "k, seq", "", ties_by_seq=False),
    "range-expressions": (
        "SELECT seq, v - min(v) OVER (PARTITION BY k || 'x' ORDER BY ts RANGE BETWEEN "
        "INTERVAL '3' SECOND PRECEDING AND CURRENT ROW) AS above FROM t WHERE x >= -1",
        "SELECT seq, v - min(v) OVER (PARTITION BY k || 'x' ORDER BY ts RANGE BETWEEN "
        "INTERVAL 3 SECOND PRECEDING AND CURRENT ROW) AS above FROM t WHERE x >= -1",
    ),
}  # fmt: skip


def duck(sql: str) -> str:
    return sql.replace("INTERVAL '2' SECOND", "INTERVAL 2 SECOND")


def run(sql: str, batches: list[pa.RecordBatch], delay: int) -> pa.Table:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", batches, schema=SCHEMA, event_time="ts",
                       watermark=ds.BoundedOutOfOrderness(milliseconds=delay * HALF_S // 1000))  # fmt: skip
    try:
        return ctx.execute_streaming(sql).to_arrow(timeout=60)
    finally:
        ctx.close()


@SETTINGS
@given(
    rows=rows_st,
    name=st.sampled_from(sorted(QUERIES)),
    disorder=st.integers(0, 12),
    max_batch=st.integers(1, 15),
    rnd=st.randoms(use_true_random=False),
)
def test_over_equals_duckdb(
    rows: list, name: str, disorder: int, max_batch: int, rnd: random.Random
) -> None:
    stream_sql, batch_sql = QUERIES[name]
    table = to_table(arrival(rows, disorder, rnd))
    got = run(stream_sql, cut(table, rnd, max_batch), disorder)
    assert_same_rows(got, duckdb_result(duck(batch_sql), {"t": table}))


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_over_through_checkpoint_and_restore(name: str, tmp_path: Path) -> None:
    """300 disordered rows, checkpointed half-way, crashed at three quarters, resumed: the
    exactly-once Parquet sink ends holding DuckDB's result."""
    stream_sql, batch_sql = QUERIES[name]
    rnd = random.Random(name)
    rows = [
        (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(8)]), rnd.randint(-8, 8),
         rnd.randint(0, 240))
        for _ in range(300)
    ]  # fmt: skip
    table = to_table(arrival(rows, 6, rnd))
    assert_restore_matches(
        stream_sql,
        duck(batch_sql),
        {"t": cut(table, rnd, 12)},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=6 * HALF_S // 1000)},
        sink="parquet",
    )


def test_rows_come_out_in_event_time_order_once_final() -> None:
    """Each row is emitted once, after the watermark passes its time, in time order (equal
    times in arrival order), and state keeps only what the frame needs."""
    rnd = random.Random(3)
    rows = [(rnd.choice("ab"), rnd.randint(0, 9), 0, rnd.randint(0, 200)) for _ in range(400)]
    table = to_table(arrival(rows, 4, rnd))
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", table, event_time="ts", batch_size=7,
                       watermark=ds.BoundedOutOfOrderness(milliseconds=4 * HALF_S // 1000))  # fmt: skip
    sql = ("SELECT seq, ts, sum(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
           "INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS s FROM t")  # fmt: skip
    with ctx.execute_streaming(sql) as q:
        got = q.to_arrow(timeout=60)
        status = q.status()
    ctx.close()
    assert sorted(got.column("seq").to_pylist()) == list(range(400))
    order = list(zip(got.column("ts").to_pylist(), got.column("seq").to_pylist(), strict=True))
    assert order == sorted(order)
    assert status["late_rows"] == 0
