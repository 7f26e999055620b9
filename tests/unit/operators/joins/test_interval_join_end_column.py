"""Interval join bounded by a column of one side (``q.ts BETWEEN p.ts + a AND p.end + b``,
Nexmark q4/q6/q9's auction/bid join): golden property test against DuckDB with the column
on either side, inner and LEFT, NULL and inverted ends, a snapshot and restore anywhere;
state purged by each row's own end."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joins_harness import BASE_US, SEC, make, rows, run, stream_steps, ts_array

from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME

TS = pa.timestamp("us")


def table(prefix: str, data: list[tuple[Any, int, int | None]], with_end: bool) -> pa.Table:
    cols: dict[str, Any] = {
        f"{prefix}id": pa.array(range(len(data)), pa.int64()),
        "k": pa.array([r[0] for r in data], pa.int64()),
        "ts": ts_array([r[1] for r in data]),
    }
    if with_end:
        cols["e"] = ts_array([None if r[2] is None else r[1] + r[2] for r in data])
    return pa.table(cols)


def config(
    kind: str, end_side: str, start: int, end: int, lt: pa.Table, rt: pa.Table
) -> dict[str, Any]:
    """``q.ts >= p.ts + start`` and ``q.ts <= p.e + end`` (seconds), ``p`` the
    ``end_side`` side."""
    fields = [lt.schema.field(n) for n in lt.column_names]
    fields += [rt.schema.field(n).with_name(f"r_{n}") for n in rt.column_names]
    cfg: dict[str, Any] = {
        "left_keys": ["k"],
        "right_keys": ["k"],
        "left_columns": [[n, n] for n in lt.column_names],
        "right_columns": [[n, f"r_{n}"] for n in rt.column_names],
        "kind": kind,
        "left_time": "ts",
        "right_time": "ts",
        "end_side": end_side,
        "end_column": "e",
        "end_offset": end * SEC,
        "schema": pa.schema(fields),
    }
    if end_side == "left":  # r.ts >= l.ts + start: l.ts - r.ts <= -start
        cfg |= {"lower_us": None, "upper_us": -start * SEC}
    else:  # l.ts >= r.ts + start
        cfg |= {"lower_us": start * SEC, "upper_us": None}
    return cfg


def expected(lt: pa.Table, rt: pa.Table, kind: str, end_side: str, start: int, end: int) -> list:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("l", lt)
    con.register("r", rt)
    p, q = ("l", "r") if end_side == "left" else ("r", "l")
    join = "LEFT JOIN" if kind == "left" else "JOIN"
    got = con.sql(
        f"SELECT l.lid, r.rid FROM l {join} r ON l.k = r.k "
        f"AND {q}.ts >= {p}.ts + to_microseconds({start * SEC}) "
        f"AND {q}.ts <= {p}.e + to_microseconds({end * SEC})"
    ).to_arrow_table()
    return rows(got, "lid", "rid")


KEY = st.one_of(st.none(), st.integers(0, 2))
#: (key, time, end - time or NULL): ends below the time are empty ranges.
RANGED = st.lists(st.tuples(KEY, st.integers(0, 40), st.one_of(st.none(), st.integers(-3, 15))))
POINTS = st.lists(st.tuples(KEY, st.integers(0, 40), st.none()), max_size=40)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    RANGED.filter(lambda r: len(r) <= 30),
    POINTS,
    st.sampled_from(["inner", "left"]),
    st.sampled_from(["left", "right"]),
    st.tuples(st.integers(-3, 3), st.integers(-3, 3)),
    st.integers(0, 2**32),
    st.sampled_from([0, 0, 4 * SEC]),
    st.integers(1, 10),
    st.one_of(st.none(), st.floats(0, 1)),
)
def test_end_column_join_equals_duckdb(
    ranged: list[Any],
    points: list[Any],
    kind: str,
    end_side: str,
    offsets: tuple[int, int],
    seed: int,
    disorder: int,
    max_batch: int,
    restore: float | None,
) -> None:
    start, end = offsets
    if end_side == "left":
        lt, rt = table("l", ranged, True), table("r", points, False)
    else:
        lt, rt = table("l", points, False), table("r", ranged, True)
    cfg = config(kind, end_side, start, end, lt, rt)
    steps = stream_steps(lt, rt, random.Random(seed), disorder_us=disorder, max_batch=max_batch)
    restore_at = None if restore is None else int(restore * (len(steps) - 1))
    out = run("interval_join", cfg, lt.schema, rt.schema, steps, restore_at=restore_at)
    assert rows(out, "lid", "r_rid") == expected(lt, rt, kind, end_side, start, end)


def _batch(t: pa.Table) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in t.columns], schema=t.schema)


def _auctions(keys: list[int], secs: list[int], ends: list[int | None]) -> pa.RecordBatch:
    """Rows ``(key, ts, end - ts)``."""
    return _batch(table("l", list(zip(keys, secs, ends, strict=True)), True))


def _bids(keys: list[int], secs: list[int]) -> pa.RecordBatch:
    return _batch(table("r", [(k, s, None) for k, s in zip(keys, secs, strict=True)], False))


def wm(s: int) -> int:
    return BASE_US + s * SEC


def test_each_row_is_held_until_the_other_watermark_passes_its_own_end() -> None:
    lt, rt = _auctions([], [], []), _bids([], [])
    cfg = config("left", "left", 0, 0, pa.Table.from_batches([lt]), pa.Table.from_batches([rt]))
    op = make("interval_join", cfg, lt.schema, rt.schema)
    # auction 1 open [10, 20], auction 2 open [10, 100]
    assert op.on_batch(_auctions([1, 2], [10, 10], [10, 90]), 0) == []
    assert op.on_watermark(wm(20), 1) == []
    assert op.describe()["left_rows_held"] == 2
    closed = op.on_watermark(wm(21), 1)  # auction 1 can match no more bids: unmatched
    assert rows(pa.Table.from_batches(closed), "lid") == [(0,)]
    assert op.describe()["left_rows_held"] == 1
    # a bid at 50 matches auction 2 and is held until the auction watermark passes 50
    out = op.on_batch(_bids([2], [50]), 1)
    assert rows(pa.Table.from_batches(out), "lid", "r_rid") == [(1, 0)]
    op.on_watermark(wm(50), 0)
    assert op.describe()["right_rows_held"] == 1
    op.on_watermark(wm(51), 0)
    assert op.describe()["right_rows_held"] == 0


def test_null_or_inverted_end_matches_nothing_and_is_not_held() -> None:
    lt, rt = _auctions([], [], []), _bids([], [])
    for kind in ("inner", "left"):
        cfg = config(kind, "left", 0, 0, pa.Table.from_batches([lt]), pa.Table.from_batches([rt]))
        op = make("interval_join", cfg, lt.schema, rt.schema)
        out = op.on_batch(_bids([1, 2], [10, 10]), 1)
        out += op.on_batch(_auctions([1, 2], [5, 5], [None, -1]), 0)
        assert op.describe()["left_rows_held"] == 0
        out += op.on_watermark(END_OF_TIME, 1) + op.on_watermark(END_OF_TIME, 0) + op.on_close()
        got = rows(pa.Table.from_batches(out, schema=op.output_schema), "lid", "r_rid")
        assert got == ([(0, None), (1, None)] if kind == "left" else [])


def test_the_bound_on_the_end_side_must_be_the_column() -> None:
    lt, rt = pa.Table.from_batches([_auctions([], [], [])]), pa.Table.from_batches([_bids([], [])])
    cfg = config("inner", "left", 0, 0, lt, rt) | {"upper_us": None}
    with pytest.raises(PlanError, match="needs lower_us and upper_us"):
        make("interval_join", cfg, lt.schema, rt.schema)
    cfg = config("inner", "left", 0, 0, lt, rt) | {"end_column": "nope"}
    with pytest.raises(PlanError, match="no column 'nope'"):
        make("interval_join", cfg, lt.schema, rt.schema)


def test_state_stays_bounded_over_a_long_in_order_run() -> None:
    """Auctions open 10 s each, bids in time order: both sides' state is about one auction
    length of rows, however long the run."""
    empty_a, empty_b = _auctions([], [], []), _bids([], [])
    cfg = config(
        "left", "left", 0, 0, pa.Table.from_batches([empty_a]), pa.Table.from_batches([empty_b])
    )
    op = make("interval_join", cfg, empty_a.schema, empty_b.schema)
    peak = emitted = 0
    for second in range(300):
        out = op.on_batch(_auctions([second], [second], [10]), 0)
        out += op.on_watermark(wm(second), 0)
        out += op.on_batch(_bids([second - 3, second - 12], [second, second]), 1)
        out += op.on_watermark(wm(second), 1)
        emitted += sum(b.num_rows for b in out)
        peak = max(peak, op.state_size()[0])
    assert peak <= 15
    assert emitted >= 300 - 12  # each auction matched its bid 3 s in; the 12 s ones none
