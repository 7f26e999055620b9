"""group_aggregate (unbounded GROUP BY): golden rule against DuckDB, changelog, types."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from agg_testkit import (
    INPUT,
    as_rows,
    assert_same_rows,
    call,
    events,
    group_config,
    make,
    oracle,
    streams,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from datum_sql.engine.changelog import apply_changelog
from datum_sql.engine.operators import operator_class
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

KEYS = [[], ["k1"], ["k2"], ["k1", "k2"]]


@pytest.mark.timeout(600)  # 25 examples, each checked against DuckDB after every batch
@settings(max_examples=25, deadline=None)
@given(stream=streams(), keys=st.sampled_from(KEYS), which=st.sampled_from(["all", "numeric"]))
def test_changelog_equals_duckdb_after_every_batch(stream, keys, which):
    op = make("group_aggregate", group_config(keys, which))
    state, seen = None, 0
    for event in events(stream):
        out = call(op, event)
        # watermarks emit nothing; the end of the input (+inf) only the one row of a
        # global aggregate over no rows
        empty_global = not keys and stream.table.num_rows == 0
        ended = event == ("wm", END_OF_TIME)
        assert event[0] == "batch" or not out or (ended and empty_global)
        for b in out:
            assert b.schema == op.output_schema
            state = apply_changelog(state, b)
        if event[0] == "close" and empty_global:
            assert state is not None and state.num_rows == 1
        if event[0] == "batch":
            seen += event[1].num_rows
            prefix = type(stream)(stream.table.slice(0, seen), [], 0, 0)
            got = as_rows(state, window=False) if state is not None else []
            assert_same_rows(got, oracle(prefix, keys, None, which))
    assert op.state_size()[0] >= (1 if stream.table.num_rows else 0)


def _op(aggs, keys=("k1",), schema=INPUT, order_column="ts"):
    fields = [(k, schema.field(k).type) for k in keys]
    fields += [(a["output"], a.pop("type")) for a in aggs]
    config = {
        "keys": list(keys),
        "aggregates": aggs,
        "state_limit_rows": None,
        "order_column": order_column,
        "schema": pa.schema([*fields, ("_op", pa.string())]),
    }
    return operator_class("group_aggregate")("g", config, [schema])


def _batch(ts, k1, vi):
    n = len(ts)
    return pa.record_batch(
        [
            pa.array(ts, pa.int64()).cast(pa.timestamp("us")),
            pa.array(k1, pa.string()),
            pa.array([0] * n, pa.int64()),
            pa.array(vi, pa.int64()),
            pa.array([None] * n, pa.float64()),
        ],
        schema=INPUT,
    )


def _rows(batches):
    return [tuple(r.values()) for b in batches for r in b.to_pylist()]


def test_changelog_ops_for_a_hand_made_case():
    op = _op(
        [
            {"func": "count", "input": "vi", "output": "n", "type": pa.int64()},
            {"func": "max", "input": "vi", "output": "m", "type": pa.int64()},
        ]
    )
    assert _rows(op.on_batch(_batch([1, 2], ["a", None], [5, None]))) == [
        ("a", 1, 5, "+I"),
        (None, 0, None, "+I"),
    ]
    assert _rows(op.on_batch(_batch([3, 4, 5], ["a", "b", None], [7, 1, None]))) == [
        ("a", 1, 5, "-U"),
        ("a", 2, 7, "+U"),
        ("b", 1, 1, "+I"),
    ]  # the NULL group did not change: nothing for it
    assert op.on_batch(_batch([6], [None], [None])) == []
    assert op.state_size()[0] == 3
    assert op.describe() == {"groups": 3}


def test_with_count_star_every_group_a_batch_touches_is_updated():
    """count(*) grows in every group a batch touches: each one gets its -U/+U pair, the
    other values unchanged or not (count(vi) alone would leave a NULL's group silent)."""
    op = _op(
        [
            {"func": "count_star", "input": None, "output": "n", "type": pa.int64()},
            {"func": "max", "input": "vi", "output": "m", "type": pa.int64()},
        ]
    )
    op.on_batch(_batch([1, 2, 3], ["a", "b", None], [5, 2, None]))
    assert _rows(op.on_batch(_batch([4, 5, 6], ["b", None, "a"], [1, None, 3]))) == [
        ("b", 1, 2, "-U"),
        ("b", 2, 2, "+U"),
        (None, 1, None, "-U"),
        (None, 2, None, "+U"),
        ("a", 1, 5, "-U"),
        ("a", 2, 5, "+U"),
    ]


def test_first_and_last_value_by_event_time_ties_by_arrival():
    aggs = [
        {"func": "first_value", "input": "vi", "output": "f", "type": pa.int64()},
        {"func": "last_value", "input": "vi", "output": "l", "type": pa.int64()},
    ]
    op = _op(aggs)
    out = op.on_batch(_batch([10, 10, 20, 20], ["a"] * 4, [1, 2, 3, None]))
    assert _rows(out) == [("a", 1, None, "+I")]  # NULL is a value for last_value
    out = op.on_batch(_batch([10, 20, 5], ["a", "a", "b"], [9, 8, 4]))
    assert _rows(out) == [("a", 1, None, "-U"), ("a", 1, 8, "+U"), ("b", 4, 4, "+I")]
    out = op.on_batch(_batch([3, 3], ["a", "a"], [6, 7]))  # earlier in time: a new first
    assert _rows(out) == [("a", 1, 8, "-U"), ("a", 6, 8, "+U")]


def test_first_value_without_order_column_is_arrival_order():
    op = _op(
        [{"func": "first_value", "input": "vi", "output": "f", "type": pa.int64()}],
        order_column=None,
    )
    assert _rows(op.on_batch(_batch([10, 1], ["a", "a"], [1, 2]))) == [("a", 1, "+I")]
    assert op.on_batch(_batch([0], ["a"], [3])) == []


def test_decimals_keep_exact_types():
    schema = pa.schema([("k1", pa.string()), ("d", pa.decimal128(10, 2))])
    aggs = [
        {"func": "sum", "input": "d", "output": "s", "type": pa.decimal128(38, 2)},
        {"func": "avg", "input": "d", "output": "a", "type": pa.float64()},
        {"func": "min", "input": "d", "output": "mn", "type": pa.decimal128(10, 2)},
        {"func": "max", "input": "d", "output": "mx", "type": pa.decimal128(10, 2)},
        {"func": "count_distinct", "input": "d", "output": "cd", "type": pa.int64()},
    ]
    op = _op(aggs, schema=schema, order_column=None)
    d = pa.decimal128(10, 2)
    b1 = pa.record_batch(
        [pa.array(["a", "a"]), pa.array([Decimal("1.10"), None], d)], schema=schema
    )
    b2 = pa.record_batch(
        [pa.array(["a", "b"]), pa.array([Decimal("99999999.99"), None], d)], schema=schema
    )
    assert _rows(op.on_batch(b1)) == [
        ("a", Decimal("1.10"), 1.1, Decimal("1.10"), Decimal("1.10"), 1, "+I")
    ]
    out = op.on_batch(b2)
    assert out[0].schema == op.output_schema
    assert _rows(out) == [
        ("a", Decimal("1.10"), 1.1, Decimal("1.10"), Decimal("1.10"), 1, "-U"),
        (
            "a",
            Decimal("100000001.09"),
            50000000.545,
            Decimal("1.10"),
            Decimal("99999999.99"),
            2,
            "+U",
        ),
        ("b", None, None, None, None, 0, "+I"),
    ]


def test_integer_and_float_result_types():
    schema = pa.schema(
        [("k", pa.int32()), ("i", pa.int16()), ("f", pa.float32()), ("u", pa.uint8())]
    )
    aggs = [
        {"func": "sum", "input": "i", "output": "si", "type": pa.int64()},
        {"func": "sum", "input": "f", "output": "sf", "type": pa.float64()},
        {"func": "avg", "input": "u", "output": "au", "type": pa.float64()},
        {"func": "min", "input": "i", "output": "mi", "type": pa.int16()},
        {"func": "max", "input": "f", "output": "mf", "type": pa.float32()},
    ]
    op = _op(aggs, keys=("k",), schema=schema, order_column=None)
    b = pa.record_batch(
        [
            pa.array([1, 1, 2], pa.int32()),
            pa.array([30000, 30000, None], pa.int16()),
            pa.array([0.5, 1.5, None], pa.float32()),
            pa.array([255, 1, 3], pa.uint8()),
        ],
        schema=schema,
    )
    out = op.on_batch(b)
    assert out[0].schema == op.output_schema
    assert _rows(out) == [
        (1, 60000, 2.0, 128.0, 30000, 1.5, "+I"),
        (2, None, None, 3.0, None, None, "+I"),
    ]


def test_group_keys_of_many_types_including_nulls():
    schema = pa.schema(
        [
            ("f", pa.float64()),
            ("b", pa.bool_()),
            ("d", pa.date32()),
            ("s", pa.dictionary(pa.int32(), pa.string())),
        ]
    )
    aggs = [{"func": "count_star", "input": None, "output": "n", "type": pa.int64()}]
    fields = [("f", pa.float64()), ("b", pa.bool_()), ("d", pa.date32()), ("s", pa.string())]
    config = {
        "keys": ["f", "b", "d", "s"],
        "aggregates": [{k: v for k, v in a.items() if k != "type"} for a in aggs],
        "state_limit_rows": None,
        "schema": pa.schema([*fields, ("n", pa.int64()), ("_op", pa.string())]),
    }
    op = operator_class("group_aggregate")("g", config, [schema])
    rows = {
        "f": [0.0, -0.0, None, float("nan"), float("nan"), 1.5],
        "b": [True, True, None, False, False, True],
        "d": [1, 1, None, 2, 2, 3],
        "s": ["x", "x", None, "y", "y", None],
    }
    b = pa.record_batch(
        [
            pa.array(rows["f"], pa.float64()),
            pa.array(rows["b"]),
            pa.array(rows["d"], pa.date32()),
            pa.array(rows["s"]).dictionary_encode(),
        ],
        schema=schema,
    )
    out = pa.Table.from_batches(op.on_batch(b) + op.on_batch(b))
    final = apply_changelog(None, out)
    assert sorted(final.column("n").to_pylist()) == [2, 2, 4, 4]  # -0.0 = 0.0, NaN = NaN


def test_state_limit():
    op = _op([{"func": "count_star", "input": None, "output": "n", "type": pa.int64()}])
    op._limit = 2
    op.on_batch(_batch([1, 2], ["a", "b"], [1, 1]))
    with pytest.raises(QueryFailed, match="'g' holds 3 state rows, over its state limit of 2"):
        op.on_batch(_batch([3], ["c"], [1]))


def test_unknown_aggregate_is_a_plan_error():
    with pytest.raises(PlanError, match="unknown aggregate 'median'"):
        _op([{"func": "median", "input": "vi", "output": "m", "type": pa.int64()}])


def test_a_schema_that_does_not_match_the_config_is_a_plan_error():
    config = {
        "keys": ["k1"],
        "aggregates": [{"func": "count_star", "input": None, "output": "n"}],
        "schema": pa.schema([("k1", pa.string()), ("n", pa.int64())]),  # no _op
    }
    with pytest.raises(PlanError, match="does not match"):
        operator_class("group_aggregate")("g", config, [INPUT])


def test_empty_global_aggregate_emits_its_row_when_its_input_ends() -> None:
    """``count(*)`` over no rows is 0 once the input's watermark reaches +inf, before the
    query ends (a subquery join reading it waits for that row), and only once."""
    op = _op([{"func": "count_star", "input": None, "output": "n", "type": pa.int64()}], keys=())
    assert op.on_watermark(10) == []
    (row,) = op.on_watermark(END_OF_TIME)
    assert row.to_pylist() == [{"n": 0, "_op": "+I"}]
    assert op.on_close() == []


def test_min_and_max_of_integers_at_their_type_limits_by_small_span_keys():
    """Small-span integer keys and numeric aggregates take the direct-addressing path;
    min/max of integers without NULLs start from the type's limits there, which must
    stay exact values."""
    schema = pa.schema([("k", pa.int64()), ("j", pa.int16()), ("i", pa.int8()), ("v", pa.int64())])
    aggs = [
        {"func": "min", "input": "i", "output": "lo", "type": pa.int8()},
        {"func": "max", "input": "i", "output": "hi", "type": pa.int8()},
        {"func": "max", "input": "v", "output": "mv", "type": pa.int64()},
        {"func": "min", "input": "v", "output": "nv", "type": pa.int64()},
    ]
    op = _op(aggs, keys=("k", "j"), schema=schema, order_column=None)
    assert op._aggs.fast
    top, bottom = 2**63 - 1, -(2**63)

    def batch(k, i, v):
        cols = [pa.array(k, pa.int64()), pa.array([3] * len(k), pa.int16()),
                pa.array(i, pa.int8()), pa.array(v, pa.int64())]  # fmt: skip
        return pa.record_batch(cols, schema=schema)

    out = op.on_batch(batch([7, 7, 8, 7], [127, -128, 127, -128], [top, 0, bottom, 5]))
    assert _rows(out) == [
        (7, 3, -128, 127, top, 0, "+I"),
        (8, 3, 127, 127, bottom, bottom, "+I"),
    ]
    assert _rows(op.on_batch(batch([8], [-128], [1]))) == [
        (8, 3, 127, 127, bottom, bottom, "-U"),
        (8, 3, -128, 127, 1, bottom, "+U"),
    ]


@settings(max_examples=300, deadline=None)
@given(
    gid=st.lists(st.integers(0, 4), max_size=30),
    ordered=st.booleans(),
    op=st.sampled_from(["min", "max"]),
    floats=st.booleans(),
    data=st.data(),
)
def test_extreme_into_equals_the_unbuffered_ufunc(gid, ordered, op, floats, data):
    """Runs of equal ids reduced at once (ids in order, one group) or ``ufunc.at``: the
    same values, NaN included (max propagates it, min skips it)."""
    from datum_sql.engine.operators.aggregates import _extreme_ufunc, extreme_into

    g = np.array(sorted(gid) if ordered else gid, np.int64)
    values = st.floats(allow_nan=True, allow_infinity=False) if floats else st.integers(-9, 9)
    v = np.array(data.draw(st.lists(values, min_size=len(g), max_size=len(g))),
                 np.float64 if floats else np.int64)  # fmt: skip
    n = int(g.max()) + 1 if len(g) else data.draw(st.integers(1, 3))
    start = np.zeros(n, v.dtype)
    got, want = start.copy(), start.copy()
    with np.errstate(invalid="ignore"):
        extreme_into(op, got, g, v)
        _extreme_ufunc(op, v.dtype).at(want, g, v)
    np.testing.assert_array_equal(got, want)
