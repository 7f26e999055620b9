"""Golden rule for the window kinds and grouping shapes beyond plain tumble/hop: hop with any
slide and size (gaps when the slide is longer), window offsets, cumulate windows, GROUP BY one
window bound, HAVING, window columns left out, GROUP BY expressions, and EMIT ON WINDOW CLOSE
on queries without an aggregate. Each query's streamed
result (EMIT ON WINDOW CLOSE or the changelog applied), its batch result (``ctx.sql``) and
DuckDB's equivalent query over the same rows are equal, also through a checkpoint + restore.

The rows and arrival orders are those of ``test_windows_golden``: a key with NULLs, equal
timestamps on a half-second grid, bounded disorder, random batch sizes. DuckDB computes the
windows with epoch arithmetic (all times are after 1970, so ``//`` floors).
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracle import assert_restore_matches, assert_same_rows
from test_windows_golden import (
    AGGS,
    DUCK_AGGS,
    MANY,
    arrival,
    cut,
    duck,
    late_mask,
    ms,
    rows_st,
    run,
    to_table,
)

import datum_sql as ds

S = 1_000_000


def _emit(emit: bool) -> str:
    return " EMIT ON WINDOW CLOSE" if emit else ""


def hop(slide_s: int, size_s: int, offset_s: int = 0) -> tuple[str, str]:
    """Windows of ``size`` starting at every multiple of ``slide`` (plus the offset)."""
    slide, size, off = slide_s * S, size_s * S, offset_s * S
    args = f"INTERVAL '{slide_s} seconds', INTERVAL '{size_s} seconds'"
    if offset_s:
        args += f", INTERVAL '{offset_s} seconds'"
    stream = (
        f"SELECT k, window_start, window_end, {AGGS} FROM hop(t, ts, {args}) "
        "GROUP BY window_start, window_end, k"
    )
    n = -(-size // slide) + 1
    duck_sql = (
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {size}) AS window_end, "
        f"{DUCK_AGGS} FROM (SELECT *, ((epoch_us(ts) - {off % slide}) // {slide} - r.i) * {slide} "
        f"+ {off % slide} AS w FROM t, range({n}) r(i)) "
        f"WHERE w <= epoch_us(ts) AND w + {size} > epoch_us(ts) GROUP BY w, k"
    )
    return stream, duck_sql


def tumble_offset(size_s: int, offset_s: int) -> tuple[str, str]:
    size, off = size_s * S, (offset_s * S) % (size_s * S)
    stream = (
        f"SELECT k, window_start, window_end, {AGGS} FROM tumble(t, ts, "
        f"INTERVAL '{size_s} seconds', INTERVAL '{offset_s} seconds') "
        "GROUP BY window_start, window_end, k"
    )
    duck_sql = (
        f"SELECT k, make_timestamp(w) AS window_start, make_timestamp(w + {size}) AS window_end, "
        f"{DUCK_AGGS} FROM (SELECT *, (epoch_us(ts) - {off}) // {size} * {size} + {off} AS w "
        "FROM t) GROUP BY w, k"
    )
    return stream, duck_sql


def cumulate(
    step_s: int, size_s: int, offset_s: int = 0, *, by_end: bool = False
) -> tuple[str, str]:
    """Windows [s, s + k * step) for k = 1..size/step, s at multiples of size (+ offset);
    ``by_end`` groups by window_end alone and leaves window_start out."""
    step, size, off = step_s * S, size_s * S, (offset_s * S) % (size_s * S)
    args = f"INTERVAL '{step_s} seconds', INTERVAL '{size_s} seconds'"
    if offset_s:
        args += f", INTERVAL '{offset_s} seconds'"
    bounds, group = (
        ("window_end", "window_end")
        if by_end
        else ("window_start, window_end", "window_start, window_end")
    )
    stream = f"SELECT k, {bounds}, {AGGS} FROM cumulate(t, ts, {args}) GROUP BY {group}, k"
    duck_bounds = "make_timestamp(e) AS window_end"
    if not by_end:
        duck_bounds = "make_timestamp(s) AS window_start, " + duck_bounds
    duck_sql = (
        f"SELECT k, {duck_bounds}, {DUCK_AGGS} FROM (SELECT *, s + r.i * {step} AS e FROM "
        f"(SELECT *, (epoch_us(ts) - {off}) // {size} * {size} + {off} AS s FROM t), "
        f"range(1, {size // step + 1}) r(i)) WHERE e > epoch_us(ts) GROUP BY s, e, k"
    )
    return stream, duck_sql


#: GROUP BY window_start alone over hop, no window column selected, HAVING on an aggregate
HOP_BY_START = (
    "SELECT k, count(*) AS n, sum(v) AS sv FROM hop(t, ts, INTERVAL '7 seconds', "
    "INTERVAL '10 seconds') GROUP BY window_start, k HAVING count(*) > 1",
    "SELECT k, count(*) AS n, CAST(sum(v) AS BIGINT) AS sv FROM (SELECT *, "
    f"(epoch_us(ts) // {7 * S} - r.i) * {7 * S} AS w FROM t, range(3) r(i)) "
    f"WHERE w + {10 * S} > epoch_us(ts) GROUP BY w, k HAVING count(*) > 1",
)
#: GROUP BY window_end alone over tumble, keys that are expressions
TUMBLE_BY_END_EXPR = (
    "SELECT window_end, upper(k) AS uk, v > 0 AS pos, count(*) AS n, max(x) AS mx "
    "FROM tumble(t, ts, INTERVAL '15 seconds') GROUP BY window_end, upper(k), v > 0",
    f"SELECT make_timestamp(w + {15 * S}) AS window_end, upper(k) AS uk, v > 0 AS pos, "
    f"count(*) AS n, max(x) AS mx FROM (SELECT *, epoch_us(ts) // {15 * S} * {15 * S} AS w "
    "FROM t) GROUP BY w, upper(k), v > 0",
)
#: unbounded GROUP BY on expressions of the event time (and a position)
GROUP_BY_EXPR = (
    "SELECT date_trunc('minute', ts) AS m, extract(minute FROM ts) AS mi, count(*) AS n, "
    "sum(v) AS sv FROM t GROUP BY 1, extract(minute FROM ts) HAVING count(*) > 0",
    "SELECT date_trunc('minute', ts) AS m, extract(minute FROM ts) AS mi, count(*) AS n, "
    "CAST(sum(v) AS BIGINT) AS sv FROM t GROUP BY 1, 2 HAVING count(*) > 0",
)

#: window table functions without GROUP BY: each row once per window holding it
STATELESS = {
    "cumulate-rows": (
        "SELECT k, v, window_start, window_end FROM cumulate(t, ts, INTERVAL '3 seconds', "
        "INTERVAL '9 seconds', INTERVAL '2 seconds')",
        f"SELECT k, v, make_timestamp(s) AS window_start, make_timestamp(e) AS window_end FROM "
        f"(SELECT *, s + r.i * {3 * S} AS e FROM (SELECT *, (epoch_us(ts) - {2 * S}) // {9 * S} "
        f"* {9 * S} + {2 * S} AS s FROM t), range(1, 4) r(i)) WHERE e > epoch_us(ts)",
    ),
    "hop-gaps-rows": (
        "SELECT k, x, window_start FROM hop(t, ts, INTERVAL '10 seconds', INTERVAL '4 seconds', "
        "INTERVAL '1 second') WHERE v > 0",
        f"SELECT k, x, make_timestamp(w) AS window_start FROM (SELECT *, (epoch_us(ts) - {S}) "
        f"// {10 * S} * {10 * S} + {S} AS w FROM t) WHERE v > 0 AND w + {4 * S} > epoch_us(ts)",
    ),
}

SHAPES = {
    "hop-7-10": hop(7, 10),
    "hop-10-4-gaps": hop(10, 4),
    "hop-4-10-offset": hop(4, 10, 3),
    "tumble-offset": tumble_offset(10, -3),
    "cumulate-5-20": cumulate(5, 20),
    "cumulate-offset": cumulate(3, 12, 7),
    "cumulate-by-end": cumulate(4, 16, by_end=True),
    "hop-by-start-having": HOP_BY_START,
    "tumble-by-end-expr": TUMBLE_BY_END_EXPR,
}
#: (upsert key of the changelog form) per shape; "" when the shape is only run emitting
KEYS = {
    "cumulate-5-20": "k, window_end",
    "cumulate-offset": "k, window_end",
    "cumulate-by-end": "k, window_end",
    "hop-by-start-having": "",
    "tumble-by-end-expr": "",
}


@MANY
@given(
    rows=rows_st,
    shape=st.sampled_from([*SHAPES, *STATELESS, "group-by-expr"]),
    emit=st.booleans(),
    disorder=st.integers(0, 30),
    slack=st.integers(0, 4),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_window_shapes_equal_duckdb_streaming_and_batch(
    rows: list,
    shape: str,
    emit: bool,
    disorder: int,
    slack: int,
    max_batch: int,
    rnd: random.Random,
) -> None:
    """Disorder within the watermark delay: nothing is late; the streamed result and
    ``ctx.sql`` of the same query both equal DuckDB's."""
    if shape in SHAPES:
        stream_sql, duck_sql = SHAPES[shape]
    else:  # neither is a windowed aggregate that EMIT ON WINDOW CLOSE applies to
        stream_sql, duck_sql = STATELESS.get(shape, GROUP_BY_EXPR)
        emit = False
    table = to_table(arrival(rows, disorder, rnd))
    got, late, status = run(stream_sql + _emit(emit), cut(table, rnd, max_batch), disorder + slack)
    assert late is None and status["late_rows"] == 0
    want = duck(duck_sql, table)
    assert_same_rows(got, want)
    ctx = ds.Context(state_dir=None)
    try:
        ctx.register_arrow("t", table, event_time="ts")
        assert_same_rows(ctx.sql(stream_sql), want)
    finally:
        ctx.close()


@st.composite
def any_window(draw: st.DrawFn) -> tuple[str, str]:
    """A tumble, hop or cumulate window of random size, slide or step, and offset."""
    kind = draw(st.sampled_from(["tumble", "hop", "cumulate"]))
    offset = draw(st.integers(-15, 15))
    if kind == "tumble":
        return tumble_offset(draw(st.integers(1, 40)), offset)
    if kind == "hop":
        return hop(draw(st.integers(1, 15)), draw(st.integers(1, 40)), offset)
    step = draw(st.integers(1, 10))
    return cumulate(step, step * draw(st.integers(1, 6)), offset, by_end=draw(st.booleans()))


@MANY
@given(
    rows=rows_st,
    window=any_window(),
    emit=st.booleans(),
    disorder=st.integers(0, 30),
    delay=st.integers(0, 30),
    lateness=st.integers(0, 30),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_any_window_equals_duckdb_over_the_rows_on_time(
    rows: list,
    window: tuple[str, str],
    emit: bool,
    disorder: int,
    delay: int,
    lateness: int,
    max_batch: int,
    rnd: random.Random,
) -> None:
    """Random sizes, slides, steps and offsets, with a watermark delay and allowed lateness
    that may or may not cover the disorder: the result equals DuckDB's over the rows the
    per-row late rule keeps, the rest are counted late, and ``ctx.sql`` equals DuckDB's
    over all the rows."""
    stream_sql, duck_sql = window
    ordered = arrival(rows, disorder, rnd)
    table = to_table(ordered)
    is_late = late_mask([r[3] for r in ordered], delay + lateness)
    on_time = to_table([r for r, x in zip(ordered, is_late, strict=True) if not x])
    got, _, status = run(
        stream_sql + _emit(emit), cut(table, rnd, max_batch), delay, lateness=lateness,
        late_via="sql",
    )  # fmt: skip
    assert status["late_rows"] == sum(is_late)
    assert_same_rows(got, duck(duck_sql, on_time))
    ctx = ds.Context(state_dir=None)
    try:
        ctx.register_arrow("t", table, event_time="ts")
        assert_same_rows(ctx.sql(stream_sql), duck(duck_sql, table))
    finally:
        ctx.close()


#: EMIT ON WINDOW CLOSE without an aggregate: rows in event-time order (``ts`` selected)
EOWC_ROWS = {
    "filter": ("SELECT ts, k, v FROM t WHERE v IS NULL OR v > 0",) * 2,
    **{
        name: tuple(q.replace("SELECT k, ", "SELECT ts, k, ", 1) for q in sql)
        for name, sql in STATELESS.items()
    },
}


@MANY
@given(
    rows=rows_st,
    shape=st.sampled_from(list(EOWC_ROWS)),
    disorder=st.integers(0, 30),
    delay=st.integers(0, 30),
    lateness=st.integers(0, 30),
    max_batch=st.integers(1, 12),
    rnd=st.randoms(use_true_random=False),
)
def test_emit_on_window_close_without_aggregate_sorts_by_event_time(
    rows: list,
    shape: str,
    disorder: int,
    delay: int,
    lateness: int,
    max_batch: int,
    rnd: random.Random,
) -> None:
    """The rows the late rule keeps, each once, in event-time order across batches; the
    late ones counted; ``ctx.sql`` of the query without the clause equals DuckDB's."""
    stream_sql, duck_sql = EOWC_ROWS[shape]
    ordered = arrival(rows, disorder, rnd)
    table = to_table(ordered)
    is_late = late_mask([r[3] for r in ordered], delay + lateness)
    on_time = to_table([r for r, x in zip(ordered, is_late, strict=True) if not x])
    got, _, status = run(
        stream_sql + _emit(True), cut(table, rnd, max_batch), delay, lateness=lateness,
        late_via="sql",
    )  # fmt: skip
    assert status["late_rows"] == sum(is_late)
    times = got.column("ts").to_pylist()
    assert times == sorted(times)
    assert_same_rows(got, duck(duck_sql, on_time))
    ctx = ds.Context(state_dir=None)
    try:
        ctx.register_arrow("t", table, event_time="ts")
        assert_same_rows(ctx.sql(stream_sql), duck(duck_sql, table))
    finally:
        ctx.close()


#: (stream SQL, DuckDB SQL, sink, upsert key)
RESTORE_CASES = {
    **{f"{name}-emit": (sql + _emit(True), duck_sql, "parquet", "")
       for name, (sql, duck_sql) in SHAPES.items()},
    **{
        f"{name}-changelog": (*sql, "duckdb", KEYS.get(name, "k, window_start"))
        for name, sql in SHAPES.items()
        if KEYS.get(name, "k, window_start")
    },
    **{name: (*sql, "parquet", "") for name, sql in STATELESS.items()},
    "group-by-expr": (*GROUP_BY_EXPR, "duckdb", "m, mi"),
    **{f"{name}-eowc": (sql + _emit(True), duck_sql, "parquet", "")
       for name, (sql, duck_sql) in EOWC_ROWS.items()},
}  # fmt: skip


@pytest.mark.parametrize("case", list(RESTORE_CASES))
def test_window_shapes_through_checkpoint_and_restore(case: str, tmp_path: Path) -> None:
    """300 disordered rows (delay 6 ticks covers the disorder) into an exactly-once sink
    (Parquet for append-only results, a DuckDB upsert for a changelog, whose keys cannot be
    NULL), checkpointed half-way, crashed at three quarters, resumed: the sink
    ends holding DuckDB's result."""
    stream_sql, duck_sql, sink, key = RESTORE_CASES[case]
    rnd = random.Random(case)
    rows = [
        (rnd.choice(["a", "b", "c", None]), rnd.choice([None, *range(-20, 20)]),
         rnd.randint(-40, 40) / 4 if rnd.random() > 0.1 else None,
         rnd.randint(0, 240))
        for _ in range(300)
    ]  # fmt: skip
    if sink == "duckdb":
        rows = [("-" if r[0] is None else r[0], *r[1:]) for r in rows]
    batches = cut(to_table(arrival(rows, 6, rnd)), rnd, 12)
    assert_restore_matches(
        stream_sql,
        duck_sql,
        {"t": batches},
        tmp_path / "state",
        event_time={"t": "ts"},
        watermark={"t": ds.BoundedOutOfOrderness(milliseconds=ms(6))},
        allowed_lateness=dt.timedelta(0),
        sink=sink,
        primary_key=key or None,
    )
