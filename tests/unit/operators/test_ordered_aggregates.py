"""array_agg/string_agg with ORDER BY in every keyed aggregate operator: the final result
equals DuckDB's over the same rows, with NULL and NaN keys, ties (by arrival) and any
batch sizes, and a snapshot/restore anywhere changes nothing."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from agg_testkit import (
    STRUCT_INPUT,
    S,
    assert_same_rows,
    call,
    events,
    final_rows,
    group_config,
    oracle,
    streams,
    window_config,
    with_structs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from datum_sql.engine.operators import operator_class

SHAPES = [
    ("window_aggregate", "tumble", 5 * S, None),
    ("window_aggregate", "hop", 5 * S, 2 * S),
    ("window_aggregate", "cumulate", 6 * S, 2 * S),
    ("session_aggregate", "session", 2 * S, None),
    ("group_aggregate", None, None, None),
]


def _make(shape: tuple, keys: list[str], emit: str, lateness: int) -> Any:
    kind, wkind, size, slide = shape
    if kind == "group_aggregate":
        config = group_config(keys, "ordered")
    else:
        config = window_config(wkind, size, slide, keys, emit, lateness, "ordered")
    return operator_class(kind)("agg", config, [STRUCT_INPUT]), config


def _events(stream: Any) -> list[tuple[str, Any]]:
    return [(k, with_structs(a) if k == "batch" else a) for k, a in events(stream)]


@settings(max_examples=60, deadline=None)
@given(
    stream=streams(),
    shape=st.sampled_from(SHAPES),
    keys=st.sampled_from([[], ["k1"], ["k2"]]),
    emit=st.sampled_from(["window_close", "changelog"]),
    cut=st.floats(0, 1),
)
def test_ordered_aggregates_equal_duckdb_through_a_restore(stream, shape, keys, emit, cut):
    op, config = _make(shape, keys, emit, stream.lateness)
    evs = _events(stream)
    at = int(cut * len(evs))
    outputs = [b for e in evs[:at] for b in call(op, e)]
    blob = op.snapshot()
    rows = op.state_size()[0]
    op, _ = _make(shape, keys, emit, stream.lateness)  # a fresh operator, as after a crash
    op.restore(blob)
    assert op.state_size()[0] == rows
    outputs += [b for e in evs[at:] for b in call(op, e)]
    window = config.get("window")
    got = final_rows(op, outputs, window=window is not None)
    want = oracle(stream, keys, window, "ordered")
    if window is None and not keys and stream.table.num_rows == 0:
        want = [(None, None, None, 0)]  # a global aggregate over no rows: one row
    assert_same_rows(got, want)


def test_a_row_skipped_by_filter_is_not_kept() -> None:
    """A NULL struct (what FILTER (WHERE ...) makes of a skipped row) adds nothing."""
    op, _ = _make(SHAPES[-1], ["k1"], "changelog", 0)
    batch = with_structs(
        pa.record_batch(
            [
                pa.array([0, 0, 0], pa.timestamp("us")),
                pa.array(["a", "a", "a"]),
                pa.array([1, 2, 3], pa.int64()),
                pa.array([3, 1, 2], pa.int64()),
                pa.array([0.5, 0.25, None]),
            ],
            schema=STRUCT_INPUT.remove(7).remove(6).remove(5),
        )
    )
    mask = pa.array([True, False, True])
    cols = [
        c if i < 5 else pa.StructArray.from_arrays(c.flatten(), names=["v", "o0"], mask=mask)
        for i, c in enumerate(batch.columns)
    ]
    out = op.on_batch(pa.RecordBatch.from_arrays(cols, schema=STRUCT_INPUT))
    assert out[0].to_pylist() == [
        {"k1": "a", "aa": ["a"], "sa": "a", "af": [0.25], "n": 3, "_op": "+I"}
    ]
