"""Session windows: golden rule against DuckDB (window functions), merges, emit modes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from agg_testkit import (
    INPUT,
    S,
    as_rows,
    assert_same_rows,
    call,
    events,
    final_rows,
    make,
    oracle,
    streams,
    window_config,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from datum_sql.engine.changelog import apply_changelog
from datum_sql.engine.operators.windows.session import SessionAggregate
from datum_sql.types import END_OF_TIME

KEYS = [[], ["k1"], ["k1", "k2"]]


@settings(max_examples=60, deadline=None)
@given(
    stream=streams(),
    gap=st.sampled_from([S, 5 * S // 2, 6 * S]),
    keys=st.sampled_from(KEYS),
    emit=st.sampled_from(["window_close", "changelog"]),
)
def test_final_result_equals_duckdb(stream, gap, keys, emit):
    config = window_config("session", gap, None, keys, emit, stream.lateness)
    op = make("session_aggregate", config)
    outputs = []
    for event in events(stream):
        out = call(op, event)
        if emit == "window_close":
            assert event[0] != "batch" or not out
            for b in out:
                for row in as_rows(pa.Table.from_batches([b]), window=True):
                    assert event[1] is None or row[1] + stream.lateness <= event[1]
        outputs += out
    assert op.state_size()[0] == 0
    assert_same_rows(final_rows(op, outputs, window=True), oracle(stream, keys, config["window"]))


@settings(max_examples=15, deadline=None)
@given(stream=streams(), gap=st.sampled_from([S, 6 * S]), keys=st.sampled_from(KEYS))
def test_changelog_is_current_after_every_batch(stream, gap, keys):
    config = window_config("session", gap, None, keys, "changelog", stream.lateness)
    op = make("window_aggregate", config)  # window_aggregate builds a session operator too
    assert isinstance(op, SessionAggregate)
    state, seen = None, 0
    for event in events(stream):
        for b in call(op, event):
            state = apply_changelog(state, b)
        if event[0] == "batch":
            seen += event[1].num_rows
            prefix = type(stream)(stream.table.slice(0, seen), [], 0, 0)
            got = as_rows(state, window=True) if state is not None else []
            assert_same_rows(got, oracle(prefix, keys, config["window"]))


def _op(emit: str, lateness: int = 0):
    schema = [("window_start", pa.timestamp("us")), ("window_end", pa.timestamp("us"))]
    schema += [("k1", pa.string()), ("n", pa.int64()), ("s", pa.int64())]
    if emit == "changelog":
        schema.append(("_op", pa.string()))
    config = {
        "window": {"kind": "session", "time_column": "ts", "size_us": 10 * S, "slide_us": None},
        "keys": ["k1"],
        "aggregates": [
            {"func": "count_star", "input": None, "output": "n"},
            {"func": "sum", "input": "vi", "output": "s"},
        ],
        "emit": emit,
        "allowed_lateness_us": lateness,
        "state_limit_rows": None,
        "schema": pa.schema(schema),
    }
    return make("session_aggregate", config)


def _batch(rows):
    ts, k1, vi = zip(*rows)
    return pa.record_batch(
        [
            pa.array([t * S for t in ts], pa.int64()).cast(pa.timestamp("us")),
            pa.array(k1, pa.string()),
            pa.array([0] * len(rows), pa.int64()),
            pa.array(vi, pa.int64()),
            pa.array([None] * len(rows), pa.float64()),
        ],
        schema=INPUT,
    )


def _rows(batches):
    out = []
    for b in batches:
        for r in b.to_pylist():
            start = int(r["window_start"].timestamp()) - int(
                pa.scalar(0, pa.timestamp("us")).as_py().timestamp()
            )
            end = start + int((r["window_end"] - r["window_start"]).total_seconds())
            out.append((start, end, r["k1"], r["n"], r["s"], r.get("_op")))
    return out


def test_a_bridging_row_merges_two_sessions_changelog():
    op = _op("changelog", lateness=10 * S)
    assert _rows(op.on_batch(_batch([(0, "a", 1), (15, "a", 2), (40, "b", 5)]))) == [
        (0, 10, "a", 1, 1, "+I"),
        (15, 25, "a", 1, 2, "+I"),
        (40, 50, "b", 1, 5, "+I"),
    ]
    assert op.on_watermark(12 * S) == []  # [0, 10) is complete but within the lateness
    # 7 is less than the gap from both 0 and 15: one session [0, 25)
    assert _rows(op.on_batch(_batch([(7, "a", 4)]))) == [
        (0, 10, "a", 1, 1, "-D"),
        (15, 25, "a", 1, 2, "-D"),
        (0, 25, "a", 3, 7, "+I"),
    ]
    assert op.state_size()[0] == 2
    # a row inside the session: an in-place update
    assert _rows(op.on_batch(_batch([(3, "a", 1)]))) == [
        (0, 25, "a", 3, 7, "-U"),
        (0, 25, "a", 4, 8, "+U"),
    ]
    # a row that extends the session moves its end: delete and insert
    assert _rows(op.on_batch(_batch([(24, "a", 0)]))) == [
        (0, 25, "a", 4, 8, "-D"),
        (0, 34, "a", 5, 8, "+I"),
    ]
    # exactly gap apart starts a new session
    assert _rows(op.on_batch(_batch([(60, "b", 1)]))) == [(60, 70, "b", 1, 1, "+I")]


def test_a_bridging_row_merges_two_sessions_window_close():
    op = _op("window_close", lateness=10 * S)
    assert op.on_batch(_batch([(0, "a", 1), (15, "a", 2)])) == []
    assert op.on_watermark(12 * S) == []
    assert op.on_batch(_batch([(7, "a", 4)])) == []
    assert op.on_watermark(34 * S) == []  # end 25 + lateness 10 = 35
    assert _rows(op.on_watermark(35 * S)) == [(0, 25, "a", 3, 7, None)]
    assert op.state_size()[0] == 0
    assert op.on_watermark(END_OF_TIME) == []


def test_one_row_can_join_sessions_of_several_keys_and_runs_in_one_batch():
    op = _op("window_close")
    op.on_batch(_batch([(0, "a", 1), (30, "a", 1), (0, None, 1), (30, None, 1)]))
    out = op.on_batch(_batch([(9, "a", 1), (21, "a", 1), (15, "a", 1), (9, None, 1), (50, "a", 2)]))
    assert out == []
    rows = sorted(_rows(op.on_watermark(END_OF_TIME)), key=lambda r: (r[2] or "", r[0]))
    assert rows == [
        (0, 19, None, 2, 2, None),
        (30, 40, None, 1, 1, None),
        (0, 40, "a", 5, 5, None),
        (50, 60, "a", 1, 2, None),
    ]


@pytest.mark.parametrize("emit", ["window_close", "changelog"])
def test_sessions_are_purged(emit):
    op = _op(emit)
    for i in range(40):
        op.on_batch(_batch([(i * 20, f"k{j}", 1) for j in range(30)]))
        op.on_watermark(i * 20 * S)
        assert op.state_size()[0] <= 30
    assert op.describe()["open_windows"] == 30
    op.on_watermark(END_OF_TIME)
    assert op.state_size()[0] == 0
    assert op.describe() == {
        "open_windows": 0,
        "oldest_open_window_end": None,
        "closes_at_watermark": None,
    }
