"""Snapshot/restore of the aggregate operators: a restored operator behaves exactly as if
it had never been interrupted."""

from __future__ import annotations

import pyarrow as pa
import pytest
from agg_testkit import INPUT, S, call, events, group_config, make, streams, window_config
from hypothesis import given, settings
from hypothesis import strategies as st

from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.errors import CheckpointError

SHAPES = [
    ("window_aggregate", "tumble", 5 * S, None),
    ("window_aggregate", "hop", 5 * S, 2 * S),
    ("window_aggregate", "cumulate", 6 * S, 2 * S),
    ("session_aggregate", "session", 2 * S, None),
    ("group_aggregate", None, None, None),
]


def _config(shape, keys, emit, lateness, which="all"):
    kind, wkind, size, slide = shape
    if kind == "group_aggregate":
        return group_config(keys, which)
    return window_config(wkind, size, slide, keys, emit, lateness, which)


def _rows(op, batches):
    """Rows in order, NaN made comparable."""
    rows = pa.Table.from_batches(batches, schema=op.output_schema).to_pylist()
    return [{k: "NaN" if v != v else v for k, v in r.items()} for r in rows]


@settings(max_examples=60, deadline=None)
@given(
    stream=streams(),
    shape=st.sampled_from(SHAPES),
    keys=st.sampled_from([[], ["k1"], ["k2"], ["k1", "k2"]]),
    emit=st.sampled_from(["window_close", "changelog"]),
    which=st.sampled_from(["all", "numeric"]),
    data=st.data(),
)
def test_restore_continues_exactly(stream, shape, keys, emit, which, data):
    config = _config(shape, keys, emit, stream.lateness, which)
    evs = events(stream)
    straight = make(shape[0], config)
    expected = [b for e in evs for b in call(straight, e)]

    cuts = sorted(data.draw(st.lists(st.integers(0, len(evs)), min_size=1, max_size=3)))
    op = make(shape[0], config)
    got, pos = [], 0
    for cut in cuts:
        for e in evs[pos:cut]:
            got += call(op, e)
        pos = cut
        blob = op.snapshot()
        assert isinstance(blob, bytes)
        rows = op.state_size()[0]
        op = make(shape[0], config)  # a fresh operator, as after a crash
        op.restore(blob)
        assert op.state_size()[0] == rows
    for e in evs[pos:]:
        got += call(op, e)
    assert _rows(op, got) == _rows(straight, expected)


@pytest.mark.parametrize("shape", SHAPES)
def test_ties_across_a_restore_still_go_by_arrival(shape):
    config = _config(shape, ["k1"], "changelog", 0)
    rows = {"ts": [10 * S], "k1": ["a"], "k2": [0], "vi": [1], "vf": [1.0]}
    first = pa.RecordBatch.from_pydict(rows, schema=INPUT)
    second = pa.RecordBatch.from_pydict({**rows, "vi": [2], "vf": [2.0]}, schema=INPUT)
    op = make(shape[0], config)
    op.on_batch(first)
    blob = op.snapshot()
    op = make(shape[0], config)
    op.restore(blob)
    out = pa.Table.from_batches(op.on_batch(second)).to_pylist()
    windows = 3 if shape[1] == "hop" else 1  # 10 s is in the hop windows at 6, 8 and 10 s
    want = [(1, 1.0, "-U"), (1, 2.0, "+U")] * windows
    assert [(r["f_vi"], r["l_vf"], r["_op"]) for r in out] == want


def test_restore_refuses_other_versions_and_kinds():
    op = make("group_aggregate", group_config(["k1"]))
    blob = op.snapshot()
    meta, tables = decode_state(blob, "group_aggregate", 1)
    newer = encode_state("group_aggregate", 2, meta, tables)
    with pytest.raises(CheckpointError, match="version 2"):
        make("group_aggregate", group_config(["k1"])).restore(newer)
    window = make("window_aggregate", window_config("tumble", S, None, ["k1"], "changelog", 0))
    with pytest.raises(CheckpointError, match="'group_aggregate' operator"):
        window.restore(blob)
    with pytest.raises(CheckpointError, match="bad magic"):
        op.restore(b"\x80\x04pickle")
    with pytest.raises(CheckpointError, match="corrupt"):
        op.restore(blob[:-10])


def test_codec_round_trip():
    tables = {"a": pa.table({"x": [1, 2, None]}), "b": pa.table({"s": ["p", None]})}
    blob = encode_state("k", 3, {"n": 2**62, "w": -(2**63)}, tables)
    meta, back = decode_state(blob, "k", 3)
    assert meta == {"n": 2**62, "w": -(2**63)}
    assert back["a"].equals(tables["a"]) and back["b"].equals(tables["b"])
