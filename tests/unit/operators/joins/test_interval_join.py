"""Streaming interval join: golden property test against DuckDB's range join (inner and
LEFT), emission of unmatched left rows, state purged by watermarks, limits, snapshots."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joins_harness import BASE_US, SEC, make, rows, run, stream_steps, ts_array

from datum_sql.errors import QueryFailed
from datum_sql.types import END_OF_TIME

TS = pa.timestamp("us")


def tables(left: list[tuple[Any, Any]], right: list[tuple[Any, Any]]) -> tuple[pa.Table, pa.Table]:
    lt = pa.table(
        {
            "lid": pa.array(range(len(left)), pa.int64()),
            "k": pa.array([r[0] for r in left], pa.int64()),
            "ts": ts_array([r[1] for r in left]),
        }
    )
    rt = pa.table(
        {
            "rid": pa.array(range(len(right)), pa.int64()),
            "k": pa.array([r[0] for r in right], pa.int64()),
            "ts": ts_array([r[1] for r in right]),
        }
    )
    return lt, rt


def config(
    kind: str = "inner", lower_s: int = -5, upper_s: int = 10, limit: int | None = None
) -> dict[str, Any]:
    schema = pa.schema(
        [("lid", pa.int64()), ("k", pa.int64()), ("ts", TS), ("rid", pa.int64()), ("r_ts", TS)]
    )
    return {
        "left_keys": ["k"],
        "right_keys": ["k"],
        "left_columns": [["lid", "lid"], ["k", "k"], ["ts", "ts"]],
        "right_columns": [["rid", "rid"], ["ts", "r_ts"]],
        "kind": kind,
        "state_limit_rows": limit,
        "left_time": "ts",
        "right_time": "ts",
        "lower_us": lower_s * SEC,
        "upper_us": upper_s * SEC,
        "schema": schema,
    }


#: Residual ON conditions: (DuckDB SQL, the compiled filter over the output columns).
RESIDUALS = {
    "l.lid > r.rid": pc.field("lid") > pc.field("rid"),
    "r.rid <> 3 AND l.lid <> 1": (pc.field("rid") != 3) & (pc.field("lid") != 1),
}


def duckdb_expected(
    lt: pa.Table, rt: pa.Table, cfg: dict[str, Any], residual: str | None = None
) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("l", lt)
    con.register("r", rt)
    join = "LEFT JOIN" if cfg["kind"] == "left" else "JOIN"
    if pa.types.is_integer(lt.schema.field("ts").type):
        lo, hi = f"r.ts + {cfg['lower_us']}", f"r.ts + {cfg['upper_us']}"
    else:
        lo = f"r.ts + to_microseconds({cfg['lower_us']})"
        hi = f"r.ts + to_microseconds({cfg['upper_us']})"
    extra = f" AND {residual}" if residual else ""
    got = con.sql(
        f"SELECT l.lid, r.rid FROM l {join} r ON l.k = r.k AND l.ts BETWEEN {lo} AND {hi}{extra}"
    ).to_arrow_table()
    return rows(got, "lid", "rid")


KEY = st.one_of(st.none(), st.integers(0, 2))
ROWS = st.lists(st.tuples(KEY, st.integers(0, 40)), max_size=40)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ROWS,
    ROWS,
    st.sampled_from(["inner", "left"]),
    st.tuples(st.integers(-8, 8), st.integers(-3, 10)),
    st.integers(0, 2**32),
    st.sampled_from([0, 0, 4 * SEC]),
    st.integers(1, 10),
    st.one_of(st.none(), st.floats(0, 1)),
    st.sampled_from([None, *RESIDUALS]),
)
def test_streaming_interval_join_equals_duckdb(
    left: list[Any],
    right: list[Any],
    kind: str,
    bounds: tuple[int, int],
    seed: int,
    disorder: int,
    max_batch: int,
    restore: float | None,
    residual: str | None,
) -> None:
    """Any bounds, empty ones (width < 0) included, with and without residual conditions."""
    lower, width = bounds
    cfg = config(kind, lower, lower + width)
    if residual:
        cfg["residual"] = RESIDUALS[residual]
    lt, rt = tables(left, right)
    steps = stream_steps(lt, rt, random.Random(seed), disorder_us=disorder, max_batch=max_batch)
    restore_at = None if restore is None else int(restore * (len(steps) - 1))
    out = run("interval_join", cfg, lt.schema, rt.schema, steps, restore_at=restore_at)
    assert rows(out, "lid", "rid") == duckdb_expected(lt, rt, cfg, residual)


def int_tables(left: list[Any], right: list[Any]) -> tuple[pa.Table, pa.Table]:
    """The tables with an int32 ``ts`` (a sequence number, not a timestamp)."""
    lt, rt = tables(left, right)
    secs = [[r[1] for r in left], [r[1] for r in right]]
    return (
        lt.set_column(2, "ts", pa.array(secs[0], pa.int32())),
        rt.set_column(2, "ts", pa.array(secs[1], pa.int32())),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ROWS,
    ROWS,
    st.sampled_from(["inner", "left"]),
    st.tuples(st.integers(-8, 8), st.integers(-3, 10)),
    st.integers(0, 2**32),
    st.sampled_from([0, 4]),
    st.booleans(),
    st.one_of(st.none(), st.floats(0, 1)),
)
def test_integer_ordering_column_equals_duckdb(
    left: list[Any],
    right: list[Any],
    kind: str,
    bounds: tuple[int, int],
    seed: int,
    disorder: int,
    watermarked: bool,
    restore: float | None,
) -> None:
    """An integer ordering column: bounds in its own units; its watermarks are used when
    they follow the column, and ignored (final at the end of input) when they do not."""
    lower, width = bounds
    cfg = config(kind) | {"lower_us": lower, "upper_us": lower + width}
    cfg["schema"] = pa.schema(
        [f.with_type(pa.int32()) if f.name.endswith("ts") else f for f in cfg["schema"]]
    )
    cfg |= {"left_watermark": watermarked, "right_watermark": watermarked}
    lt, rt = int_tables(left, right)
    steps = stream_steps(lt, rt, random.Random(seed), disorder_us=disorder, max_batch=7)
    if not watermarked:  # watermarks of another column: far ahead, they must not close rows
        steps = [
            (s[0], s[1], s[2] + 10**9) if s[0] == "wm" and s[2] < END_OF_TIME else s for s in steps
        ]
    restore_at = None if restore is None else int(restore * (len(steps) - 1))
    out = run("interval_join", cfg, lt.schema, rt.schema, steps, restore_at=restore_at)
    assert rows(out, "lid", "rid") == duckdb_expected(lt, rt, cfg)


# -- hand-made cases -------------------------------------------------------------------------
def _left(ids: list[int], keys: list[Any], secs: list[int | None]) -> pa.RecordBatch:
    return pa.record_batch(
        {"lid": pa.array(ids, pa.int64()), "k": pa.array(keys, pa.int64()), "ts": ts_array(secs)}
    )


def _right(ids: list[int], keys: list[Any], secs: list[int | None]) -> pa.RecordBatch:
    return pa.record_batch(
        {"rid": pa.array(ids, pa.int64()), "k": pa.array(keys, pa.int64()), "ts": ts_array(secs)}
    )


L_SCHEMA = _left([], [], []).schema
R_SCHEMA = _right([], [], []).schema


def wm(s: int) -> int:
    return BASE_US + s * SEC


def _pairs(batches: list[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    return rows(pa.Table.from_batches(batches), "lid", "rid") if batches else []


def test_unmatched_left_row_waits_until_the_right_watermark_passes_l_ts_minus_lower() -> None:
    op = make("interval_join", config("left", lower_s=-5, upper_s=10), L_SCHEMA, R_SCHEMA)
    assert op.on_batch(_left([1], [7], [20]), 0) == []
    # partners need r.ts in [10, 25]: one at 25 may arrive while the right watermark is 25
    assert op.on_watermark(wm(25), 1) == []
    assert _pairs(op.on_batch(_right([9], [7], [25]), 1)) == [(1, 9)]
    op2 = make("interval_join", config("left", lower_s=-5, upper_s=10), L_SCHEMA, R_SCHEMA)
    op2.on_batch(_left([1], [7], [20]), 0)
    assert op2.on_watermark(wm(25), 1) == []
    assert _pairs(op2.on_watermark(wm(25) + 1, 1)) == [(1, None)]
    assert op2.state_size()[0] == 0
    # NULL key: emitted at once (left), dropped (inner)
    assert _pairs(op2.on_batch(_left([2], [None], [30]), 0)) == [(2, None)]
    inner = make("interval_join", config("inner"), L_SCHEMA, R_SCHEMA)
    assert inner.on_batch(_left([2], [None], [30]), 0) == []


def test_right_rows_stay_while_the_left_watermark_is_at_r_ts_plus_upper() -> None:
    op = make("interval_join", config("inner", lower_s=-5, upper_s=10), L_SCHEMA, R_SCHEMA)
    op.on_batch(_right([1], [7], [0]), 1)
    op.on_watermark(wm(10), 0)  # a left row at 10 is on time and matches r.ts = 0
    assert _pairs(op.on_batch(_left([5], [7], [10]), 0)) == [(5, 1)]
    # arrives when the left watermark is already 10: meets the held left row, and is held
    assert _pairs(op.on_batch(_right([2], [7], [0]), 1)) == [(5, 2)]
    assert _pairs(op.on_batch(_left([6], [7], [10]), 0)) == [(6, 1), (6, 2)]
    op.on_watermark(wm(10) + 1, 0)
    assert op.describe()["right_rows_held"] == 0


def test_state_is_purged_by_watermarks() -> None:
    op = make("interval_join", config("left", lower_s=0, upper_s=3), L_SCHEMA, R_SCHEMA)
    peak = 0
    n, batch = 20_000, 200
    emitted = 0
    for i in range(0, n, batch):
        ids = list(range(i, i + batch))
        secs = [j // 10 for j in ids]
        keys = [j % 5 for j in ids]
        emitted += sum(b.num_rows for b in op.on_batch(_right(ids, keys, secs), 1))
        emitted += sum(b.num_rows for b in op.on_watermark(wm(secs[-1]), 1))
        emitted += sum(b.num_rows for b in op.on_batch(_left(ids, keys, secs), 0))
        emitted += sum(b.num_rows for b in op.on_watermark(wm(secs[-1]), 0))
        peak = max(peak, op.state_size()[0])
    assert peak < 3 * batch
    for port in (1, 0):
        emitted += sum(b.num_rows for b in op.on_watermark(END_OF_TIME, port))
    emitted += sum(b.num_rows for b in op.on_close())
    assert op.state_size()[0] == 0
    # each left row meets the right rows of its key in [ts - 3 s, ts]: 2 per second x 4 s
    assert emitted > n


def test_key_slots_of_keys_gone_from_state_are_forgotten() -> None:
    op = make("interval_join", config(lower_s=0, upper_s=1), L_SCHEMA, R_SCHEMA)
    for i in range(0, 50_000, 1000):
        ids = list(range(i, i + 1000))
        op.on_batch(_right(ids, ids, [i // 1000] * 1000), 1)
        op.on_watermark(wm(i // 1000), 1)
        op.on_batch(_left(ids, ids, [i // 1000] * 1000), 0)
        op.on_watermark(wm(i // 1000), 0)
    assert op.describe()["keys"] < 15_000  # not 50_000


def test_state_limit_names_the_side() -> None:
    op = make("interval_join", config(limit=3), L_SCHEMA, R_SCHEMA)
    with pytest.raises(QueryFailed, match=r"left input.*limit of 3"):
        op.on_batch(_left([1, 2, 3, 4], [1, 1, 1, 1], [1, 2, 3, 4]), 0)
    op = make("interval_join", config(limit=3), L_SCHEMA, R_SCHEMA)
    with pytest.raises(QueryFailed, match=r"right input.*limit of 3"):
        op.on_batch(_right([1, 2, 3, 4], [1, 1, 1, 1], [1, 2, 3, 4]), 1)


def test_snapshot_restore_mid_stream_equals_an_uninterrupted_run() -> None:
    rng = random.Random(5)
    left = [(rng.choice([0, 1, 2, None]), rng.randint(0, 300)) for _ in range(400)]
    right = [(rng.choice([0, 1, 2, None]), rng.randint(0, 300)) for _ in range(400)]
    lt, rt = tables(left, right)
    steps = stream_steps(lt, rt, random.Random(2), disorder_us=6 * SEC, max_batch=25)
    for cfg in (config("left", -4, 7), config("inner", 2, 2)):
        whole = run("interval_join", cfg, lt.schema, rt.schema, steps)
        assert whole.num_rows > 0
        for at in (2, len(steps) // 3, len(steps) - 4):
            again = run("interval_join", cfg, lt.schema, rt.schema, steps, restore_at=at)
            assert rows(again, *again.column_names) == rows(whole, *whole.column_names)


def test_empty_interval_matches_nothing_and_holds_nothing() -> None:
    """lower > upper: no pair; LEFT emits each left row unmatched on arrival; no state."""
    for kind in ("inner", "left"):
        op = make("interval_join", config(kind, lower_s=3, upper_s=2), L_SCHEMA, R_SCHEMA)
        out = op.on_batch(_right([7], [1], [10]), 1)
        out += op.on_batch(_left([0, 1], [1, 1], [10, 12]), 0)
        out += op.on_batch(_right([8], [1], [9]), 1)
        assert op.state_size()[0] == 0
        assert _pairs(out) == ([(0, None), (1, None)] if kind == "left" else [])
