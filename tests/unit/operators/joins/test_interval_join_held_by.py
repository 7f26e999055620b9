"""The interval join holds its rows by key or by time (keys then checked on the pairs the
time ranges meet), whichever the pair counts make cheaper, and switches as they change:
results equal DuckDB's in either way of holding, across switches and snapshots, with NULL
keys, many equal keys and equal timestamps; a tiny side against a big one is held by
time (no key index over the big side's keys), a long-lived side keyed by unique ids by
key."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joins_harness import BASE_US, SEC, make, rows, run, stream_steps
from test_interval_join import config, duckdb_expected, tables
from test_interval_join_end_column import config as end_config
from test_interval_join_end_column import expected as end_expected
from test_interval_join_end_column import table as end_table

from datum_sql.engine.operators.joins.interval import IntervalJoin, _Growing, _take_few
from datum_sql.types import END_OF_TIME

TS = pa.timestamp("us")

#: class settings that force a way of holding: always by time, never, or a switch after
#: nearly every batch (by time while no pair was met, back by key at the first one)
HOLDING = {
    "time": {"BY_TIME": 1e30, "BY_KEY": 1e31},
    "key": {"BY_TIME": -1.0},
    "switching": {"BY_TIME": 1e30, "BY_KEY": 0.0},
}


@contextmanager
def holding(way: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in HOLDING[way].items():
            mp.setattr(IntervalJoin, name, value)
        yield


#: few keys (many equal ones), NULL keys, times in a short range (many equal timestamps)
KEY = st.one_of(st.none(), st.integers(0, 2))
ROWS = st.lists(st.tuples(KEY, st.integers(0, 12)), max_size=40)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ROWS,
    ROWS,
    st.sampled_from(["inner", "left"]),
    st.tuples(st.integers(-6, 6), st.integers(-2, 8)),
    st.sampled_from(sorted(HOLDING)),
    st.integers(0, 2**32),
    st.sampled_from([0, 3 * SEC]),
    st.integers(1, 8),
    st.one_of(st.none(), st.floats(0, 1)),
)
def test_any_way_of_holding_equals_duckdb(
    left: list[Any],
    right: list[Any],
    kind: str,
    bounds: tuple[int, int],
    way: str,
    seed: int,
    disorder: int,
    max_batch: int,
    restore: float | None,
) -> None:
    lower, width = bounds
    cfg = config(kind, lower, lower + width)
    lt, rt = tables(left, right)
    steps = stream_steps(lt, rt, random.Random(seed), disorder_us=disorder, max_batch=max_batch)
    restore_at = None if restore is None else int(restore * (len(steps) - 1))
    with holding(way):
        out = run("interval_join", cfg, lt.schema, rt.schema, steps, restore_at=restore_at)
    assert rows(out, "lid", "rid") == duckdb_expected(lt, rt, cfg)


RANGED = st.lists(
    st.tuples(KEY, st.integers(0, 12), st.one_of(st.none(), st.integers(-3, 10))), max_size=30
)
POINTS = st.lists(st.tuples(KEY, st.integers(0, 12), st.none()), max_size=40)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    RANGED,
    POINTS,
    st.sampled_from(["inner", "left"]),
    st.sampled_from(["left", "right"]),
    st.tuples(st.integers(-3, 3), st.integers(-3, 3)),
    st.sampled_from(sorted(HOLDING)),
    st.integers(0, 2**32),
    st.integers(1, 8),
    st.one_of(st.none(), st.floats(0, 1)),
)
def test_any_way_of_holding_a_join_bounded_by_a_column_equals_duckdb(
    ranged: list[Any],
    points: list[Any],
    kind: str,
    end_side: str,
    offsets: tuple[int, int],
    way: str,
    seed: int,
    max_batch: int,
    restore: float | None,
) -> None:
    start, end = offsets
    if end_side == "left":
        lt, rt = end_table("l", ranged, True), end_table("r", points, False)
    else:
        lt, rt = end_table("l", points, False), end_table("r", ranged, True)
    cfg = end_config(kind, end_side, start, end, lt, rt)
    steps = stream_steps(lt, rt, random.Random(seed), max_batch=max_batch)
    restore_at = None if restore is None else int(restore * (len(steps) - 1))
    with holding(way):
        out = run("interval_join", cfg, lt.schema, rt.schema, steps, restore_at=restore_at)
    assert rows(out, "lid", "r_rid") == end_expected(lt, rt, kind, end_side, start, end)


def side(start: int, n: int, keys: int, step_us: int) -> pa.RecordBatch:
    """``n`` rows from id ``start``: key ``id % keys``, one every ``step_us``."""
    ids = list(range(start, start + n))
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([i % keys for i in ids], pa.int64()),
            "ts": pa.array([BASE_US + i * step_us for i in ids], TS),
        }
    )


SCHEMA = side(0, 1, 1, 1).schema


INT64 = pa.int64()


def pair_config(lower_s: int, upper_s: int, key_type: pa.DataType = INT64) -> dict:
    schema = pa.schema(
        [("lid", pa.int64()), ("lk", key_type), ("rid", pa.int64()), ("rk", key_type)]
    )
    return {
        "left_keys": ["k"], "right_keys": ["k"],
        "left_columns": [["id", "lid"], ["k", "lk"]],
        "right_columns": [["id", "rid"], ["k", "rk"]],
        "kind": "inner", "left_time": "ts", "right_time": "ts",
        "lower_us": lower_s * SEC, "upper_us": upper_s * SEC, "schema": schema,
    }  # fmt: skip


def test_a_tiny_side_against_a_big_one_is_held_by_time_without_a_key_index() -> None:
    """Nexmark q7's shape: many rows with distinct keys, one row of the other side per
    10 s, each matching the few rows of its key in its window."""
    op = make("interval_join", pair_config(-10, 0), SCHEMA, SCHEMA)
    got = []
    for i in range(40):  # 1000 left rows a second, keys unique
        got += op.on_batch(side(i * 1000, 1000, 10**9, SEC // 1000), 0)
        if i % 10 == 9:  # the right row at the window's end carries the key of row i*1000
            wm = BASE_US + (i + 1) * SEC
            right = side(0, 1, 1, 1).to_pydict()
            right["k"], right["ts"], right["id"] = [i * 1000 - 500], [wm], [i]
            got += op.on_batch(pa.RecordBatch.from_pydict(right, schema=SCHEMA), 1)
            got += op.on_watermark(wm, 1)
            got += op.on_watermark(wm, 0)
    assert op.describe()["held_by"] == "time"
    assert op.describe()["keys"] == 0  # no key index over the big side's keys
    out = pa.Table.from_batches(got, schema=op.output_schema)
    assert rows(out, "lid", "rid") == [(i * 1000 - 500, i) for i in (9, 19, 29, 39)]


def test_rows_of_unique_keys_held_long_are_held_by_key() -> None:
    """Nexmark q4's shape: each left row open for long, matched by its key only; by time
    every right row would meet every open left row."""
    op = make("interval_join", pair_config(-1000, 0), SCHEMA, SCHEMA)
    op.on_batch(side(0, 5000, 10**9, 1000), 0)
    got = op.on_batch(side(0, 5000, 10**9, 1000), 1)
    assert op.describe()["held_by"] == "key"
    assert sum(b.num_rows for b in got) == 5000


def test_held_by_time_a_probe_meeting_too_many_pairs_holds_by_key_and_answers() -> None:
    op = make("interval_join", pair_config(-1000, 0), SCHEMA, SCHEMA)
    op.TOO_MANY_MIN = 0
    op.on_batch(side(0, 2000, 10**9, 1000), 0)
    op._hold_by_time()  # as if probes had met few pairs so far
    got = op.on_batch(side(0, 2000, 10**9, 1000), 1)  # 4 million pairs by time
    assert op.describe()["held_by"] == "key"
    out = pa.Table.from_batches(got, schema=op.output_schema)
    assert rows(out, "lid", "rid") == [(i, i) for i in range(2000)]


def test_keys_that_are_not_integers_are_always_held_by_key() -> None:
    schema = pa.schema([("id", pa.int64()), ("k", pa.string()), ("ts", TS)])

    def batch(n: int) -> pa.RecordBatch:
        b = side(0, n, 10**9, 1000)
        return pa.RecordBatch.from_arrays(
            [b.column(0), b.column(1).cast(pa.string()), b.column(2)], schema=schema
        )

    op = make("interval_join", pair_config(-1, 0, pa.string()), schema, schema)
    op.on_batch(batch(1000), 0)
    got = op.on_batch(batch(3), 1)
    assert op.describe()["held_by"] == "key"
    assert sum(b.num_rows for b in got) == 3


def test_a_snapshot_held_by_time_restores_and_goes_on() -> None:
    def drive(restore_at: int | None) -> list[tuple[Any, ...]]:
        with holding("time"):
            op = make("interval_join", pair_config(-2, 2), SCHEMA, SCHEMA)
            got = []
            for i in range(12):
                if i == restore_at:
                    assert op.describe()["held_by"] == "time"
                    data = op.snapshot()
                    op = make("interval_join", pair_config(-2, 2), SCHEMA, SCHEMA)
                    op.restore(data)
                got += op.on_batch(side(i * 300, 300, 7, SEC // 100), i % 2)
                got += op.on_watermark(BASE_US + i * 3 * SEC - 2 * SEC, i % 2)
            got += op.on_watermark(END_OF_TIME, 0) + op.on_watermark(END_OF_TIME, 1)
            got += op.on_close()
        return rows(pa.Table.from_batches(got, schema=op.output_schema), "lid", "rid")

    whole = drive(None)
    assert len(whole) > 1000
    assert drive(5) == whole


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3000)), max_size=12))
def test_growing_arrays_drop_at_the_front_and_append_at_the_back(
    steps: list[tuple[int, int]],
) -> None:
    """What the held rows' arrays become as in-order batches arrive and purged rows leave
    from the front: each step's view equals the plain concatenation, and views handed out
    before are not written to."""
    grow, view, plain, seen = _Growing(), np.empty(0, np.int64), np.empty(0, np.int64), []
    start = 0
    for drop, add in steps:
        first = min(drop, len(view))
        new = np.arange(start, start + add, dtype=np.int64)
        start += add
        view = grow.extend(view, first, new)
        plain = np.concatenate([plain[first:], new])
        assert np.array_equal(view, plain)
        seen.append((view, plain.copy()))
    for old, want in seen:
        assert np.array_equal(old, want)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=6),
    st.lists(st.integers(0, 10**6), max_size=10),
)
def test_a_few_rows_taken_from_the_chunks_they_lie_in_are_the_rows_taken(
    sizes: list[int], picks: list[int]
) -> None:
    parts = []
    start = 0
    for n in sizes:
        ids = list(range(start, start + n))
        parts.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "s": pa.array([f"row {i}" for i in ids], pa.string()),
                }
            )
        )
        start += n
    table = pa.concat_tables(parts)
    if not table.num_rows:
        return
    rows_ = np.array([p % table.num_rows for p in picks], np.int64)
    got = _take_few(table, rows_)
    assert got.to_pylist() == table.take(pa.array(rows_, pa.int64())).to_pylist()
