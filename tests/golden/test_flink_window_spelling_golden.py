"""Golden rule for Flink's window table-valued functions: ``FROM TABLE(TUMBLE(TABLE t,
DESCRIPTOR(ts), ...))`` (and HOP, CUMULATE, SESSION) is another spelling of ``tumble(t, ts,
...)``. For each kind, the Flink spelling streamed, the Flink spelling as a batch query, the
datum-sql spelling streamed, and DuckDB's query over the same rows are equal."""

from __future__ import annotations

import random

import pytest
from oracle import assert_same_rows
from test_window_shapes_golden import cumulate, hop, tumble_offset
from test_windows_golden import arrival, cut, duck, run, session_sql, to_table

import datum_sql as ds

CASES = {
    "tumble": tumble_offset(4, 0),
    "tumble-offset": tumble_offset(5, 2),
    "hop": hop(2, 6),
    "cumulate": cumulate(2, 6),
    "session": session_sql(3, emit=False),
}

#: k, v, x, half-second tick: two keys and a NULL key, equal times, gaps that end sessions
ROWS = [
    (k, v, v / 4, tick)
    for v, (k, tick) in enumerate(
        [("a", 0), ("b", 1), ("a", 1), (None, 3), ("a", 6), ("b", 9), ("a", 9), ("b", 10),
         ("a", 17), (None, 18), ("b", 22), ("a", 23), ("a", 30), ("b", 31), ("a", 44)]
    )
]  # fmt: skip


def flink(sql: str) -> str:
    """``... FROM kind(t, ts, ARGS) GROUP BY ...`` in Flink's spelling."""
    head, rest = sql.split(" FROM ", 1)
    kind, rest = rest.split("(t, ts, ", 1)
    args, tail = rest.split(") GROUP BY ", 1)
    return f"{head} FROM TABLE({kind.upper()}(TABLE t, DESCRIPTOR(ts), {args})) GROUP BY {tail}"


@pytest.mark.parametrize("case", list(CASES))
def test_the_flink_spelling_equals_duckdb_streaming_and_batch(case: str) -> None:
    ours, duck_sql = CASES[case]
    theirs = flink(ours)
    assert "TABLE(" in theirs and "DESCRIPTOR(ts)" in theirs
    rnd = random.Random(7)
    table = to_table(arrival(ROWS, 2, rnd))
    want = duck(duck_sql, table)
    assert want.num_rows > 2  # several windows, so equal results say something
    batches = cut(table, rnd, 4)
    streamed, late, status = run(theirs, batches, 3)
    assert late is None and status["late_rows"] == 0
    assert_same_rows(streamed, want)
    assert_same_rows(run(ours, batches, 3)[0], want)
    ctx = ds.Context(state_dir=None)
    try:
        ctx.register_arrow("t", table, event_time="ts")
        assert_same_rows(ctx.sql(theirs), want)
        assert ctx.explain(theirs) == ctx.explain(ours)
    finally:
        ctx.close()
