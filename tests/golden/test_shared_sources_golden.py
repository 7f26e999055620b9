"""Golden rule for queries that read one table twice: a stream and a bounded (lookup or
subquery) side over the same table, a self-join, a union of a table with itself.

A bounded side is read again from its start on every (re)start while a stream resumes
from its checkpointed position, so the two readers of one table must never share a
position: each case streams, through a checkpoint, a crash and a restore, and must end
holding DuckDB's batch result. A one-shot input (a RecordBatchReader, an iterator) that
two readers would each read is refused at planning, naming the table; one reader shared
by both roles reads it once.
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
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: name -> SQL over the stream s(k, v, ts) and the bounded table t(k, x), each reading
#: one of them twice; the same text runs in DuckDB.
SHAPES = {
    # t read as a stream (the left of a lookup join) and as its table
    "self_lookup_join": (
        "SELECT a.k, a.x, b.x AS bx FROM t AS a JOIN t AS b ON a.k = b.k "
        "UNION ALL SELECT k, v, v AS w FROM s"
    ),
    "self_left_lookup_join": (
        "SELECT a.k, a.x, b.x AS bx FROM t AS a LEFT JOIN t AS b ON a.k = b.k "
        "UNION ALL SELECT k, v, v AS w FROM s"
    ),
    "stream_and_lookup": (
        "SELECT s.k, s.v, t.x FROM s JOIN t ON s.k = t.k UNION ALL SELECT k, x, x AS w FROM t"
    ),
    # t read as a stream and as a subquery's table
    "self_in": (
        "SELECT k, x FROM t WHERE k IN (SELECT k FROM t WHERE x > 4) UNION ALL SELECT k, v FROM s"
    ),
    "self_not_exists": (
        "SELECT k, x FROM t WHERE NOT EXISTS (SELECT 1 FROM t AS u WHERE u.k = t.k AND u.x > t.x) "
        "UNION ALL SELECT k, v FROM s"
    ),
    "stream_in_and_stream": (
        "SELECT k, v FROM s WHERE k IN (SELECT k FROM t) UNION ALL SELECT k, x FROM t"
    ),
    # a CTE (as a view is) over t, read as a stream and as a subquery's table
    "cte_twice": (
        "WITH w AS (SELECT k, x FROM t WHERE x IS NOT NULL) "
        "SELECT k, v FROM s WHERE k IN (SELECT k FROM w) UNION ALL SELECT k, x FROM w"
    ),
    # s read twice as a stream
    "union_itself": "SELECT k, v, ts FROM s UNION ALL SELECT k, v, ts FROM s WHERE v > 2",
    "self_interval_join": (
        "SELECT a.k, a.v, b.v AS bv FROM s AS a JOIN s AS b ON a.k = b.k "
        "AND a.ts BETWEEN b.ts - INTERVAL '1' SECOND AND b.ts + INTERVAL '1' SECOND"
    ),
}

key = st.sampled_from([1, 1, 2, 3, None])
value = st.sampled_from([0, 3, 5, 8, None])
stream_rows = st.lists(st.tuples(key, value, st.integers(0, 2)), max_size=40)
table_rows = st.lists(st.tuples(key, value), max_size=10)


def stream_table(rows: list[tuple]) -> pa.Table:
    """Row ``i`` at second ``i + jitter`` (jitter 0-2 s): disorder within the watermark."""
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.int64()),
            "ts": pa.array([BASE + dt.timedelta(seconds=i + r[2]) for i, r in enumerate(rows)], TS),
        }
    )


def bounded_table(rows: list[tuple]) -> pa.Table:
    return pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "x": pa.array([r[1] for r in rows], pa.int64()),
        }
    )


def random_rows(rnd: random.Random, n: int) -> list[tuple]:
    return [
        (rnd.choice([1, 2, 3, None]), rnd.choice([0, 3, 5, None]), rnd.randint(0, 2))
        for _ in range(n)
    ]


T_ROWS = [(1, 5), (1, 5), (3, None), (None, 3), (2, 8), (3, 0), (4, 1)]


@SETTINGS
@given(
    rows=stream_rows,
    table=table_rows,
    size=st.integers(1, 9),
    shape=st.sampled_from(sorted(SHAPES)),
)
def test_reading_a_table_twice_equals_duckdb(
    rows: list, table: list, size: int, shape: str
) -> None:
    s, t = stream_table(rows), bounded_table(table)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("s", s, event_time="ts", watermark=DELAY, batch_size=size)
    ctx.register_arrow("t", t, batch_size=size)
    got = ctx.execute_streaming(SHAPES[shape]).to_arrow(timeout=60)
    want = duckdb_result(SHAPES[shape], {"s": s, "t": t})
    assert_same_rows(got, want)
    assert_same_rows(ctx.sql(SHAPES[shape]), want)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_reading_a_table_twice_through_checkpoint_and_restore(shape: str, tmp_path: Path) -> None:
    """The stream s is checkpointed half-way, crashed at three quarters and resumed; t is
    read whole before the checkpoint. Its stream reader resumes at its end while its table
    reader reads it again: the sink holds each row once."""
    rnd = random.Random(f"shared-{shape}")
    s, t = stream_table(random_rows(rnd, 120)), bounded_table(T_ROWS)
    assert_restore_matches(
        SHAPES[shape],
        SHAPES[shape],
        {"s": s.to_batches(max_chunksize=rnd.randint(3, 9)), "t": t.to_batches(max_chunksize=2)},
        tmp_path / "state",
        hold=["s"],
        event_time={"s": "ts"},
        watermark={"s": DELAY},
        sink="parquet",
    )


def reader(table: pa.Table) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=2))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT k, x FROM r WHERE k IN (SELECT k FROM r WHERE x > 4)",
        "SELECT a.k, b.x FROM r AS a JOIN r AS b ON a.k = b.k",
        "SELECT s.k, r.x FROM s JOIN r ON s.k = r.k UNION ALL SELECT k, x FROM r",
    ],
)
def test_a_one_shot_reader_read_by_two_readers_is_refused(sql: str) -> None:
    """A RecordBatchReader can be read once: a stream reader and a table reader of it
    would each read it, the second seeing nothing. Refused before anything is read."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("s", stream_table(random_rows(random.Random(1), 10)), event_time="ts")
    ctx.register_arrow("r", reader(bounded_table(T_ROWS)))
    with pytest.raises(ds.PlanError, match="'r' is a one-shot"):
        ctx.execute_streaming(sql)
    # nothing was read: a query reading it once still sees every row
    got = ctx.execute_streaming("SELECT k, x FROM r").to_arrow(timeout=60)
    assert_same_rows(got, bounded_table(T_ROWS))


def test_one_shot_inputs_read_twice_as_one_stream_are_read_once() -> None:
    """A union of a one-shot input with itself, and a self interval join of a one-shot
    iterator, read it through one reader feeding both: every row, as DuckDB has it."""
    t = bounded_table(T_ROWS)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("r", reader(t))
    sql = "SELECT k, x FROM r UNION ALL SELECT k, x FROM r WHERE x > 2"
    assert_same_rows(ctx.execute_streaming(sql).to_arrow(timeout=60), duckdb_result(sql, {"r": t}))

    s = stream_table(random_rows(random.Random(2), 60))
    ctx.register_arrow(
        "g", iter(s.to_batches(max_chunksize=4)), schema=s.schema, event_time="ts", watermark=DELAY,
    )  # fmt: skip
    join = SHAPES["self_interval_join"].replace(" s AS", " g AS")
    want = duckdb_result(join, {"g": s})
    assert want.num_rows > 0
    got = ctx.execute_streaming(join)  # unbounded (an iterator): read to its end
    assert_same_rows(pa.Table.from_batches(list(got), schema=want.schema), want)


def test_a_one_shot_reader_read_by_a_second_query_is_refused() -> None:
    """Two queries, each reading the reader once: the second would see what the first
    left, so it is refused; the first still reads every row."""
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("r", reader(bounded_table(T_ROWS)))
    first = ctx.execute_streaming("SELECT k, x FROM r")
    with pytest.raises(ds.PlanError, match="'r' is a one-shot iterator that another query"):
        ctx.execute_streaming("SELECT k FROM r WHERE x > 2")
    assert_same_rows(first.to_arrow(timeout=60), bounded_table(T_ROWS))
