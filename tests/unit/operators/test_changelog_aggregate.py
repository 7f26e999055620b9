"""changelog_aggregate (unbounded GROUP BY over a changelog): after every batch, the
changelog it emitted, applied, equals DuckDB's GROUP BY over the rows still live in its
input; groups whose rows all left are deleted; retractions it cannot honour fail loudly;
snapshots carry the multisets and the row counts."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from agg_testkit import AGGS, ORDERED, STRUCT_INPUT, STRUCTS, assert_same_rows, spec
from hypothesis import given, settings
from hypothesis import strategies as st

from datum_sql.engine.changelog import apply_changelog
from datum_sql.engine.operators import operator_class
from datum_sql.errors import PlanError, QueryFailed

SCHEMA = pa.schema([*STRUCT_INPUT, ("_op", pa.string())])
#: Every aggregate that can take rows back out (all of the testkit's but first/last_value),
#: array_agg ordered by the unique ts (rows tied on every key keep no one order).
CALLS = [a for a in [*AGGS, *ORDERED] if a[0] not in ("first_value", "last_value")]
CALLS = [a for a in CALLS if a[0] not in ("array_agg", "string_agg") or a[1] == "s_vf_ts"]
KEYS = [[], ["k1"], ["k2"], ["k1", "k2"]]


def _spec(call: tuple) -> dict[str, Any]:
    func, inp, name, _, _, params = call
    return spec(func, inp, name, params)


def make(keys: list[str], calls: list[tuple] = CALLS) -> Any:
    fields = [(k, SCHEMA.field(k).type) for k in keys]
    fields += [(c[2], c[3]) for c in calls]
    config = {
        "keys": keys,
        "aggregates": [_spec(c) for c in calls],
        "state_limit_rows": None,
        "schema": pa.schema([*fields, ("_op", pa.string())]),
    }
    return operator_class("changelog_aggregate")("agg", config, [SCHEMA])


def batch(rows: list[tuple], ops: list[str]) -> pa.RecordBatch:
    """Rows (ts, k1, k2, vi, vf) with their ops, as the operator reads them."""
    cols = list(zip(*rows)) if rows else [[]] * 5
    plain = [
        pa.array(cols[0], pa.int64()).cast(pa.timestamp("us")),
        pa.array(cols[1], pa.string()),
        pa.array(cols[2], pa.int64()),
        pa.array(cols[3], pa.int64()),
        pa.array(cols[4], pa.float64()),
    ]
    by_name = dict(zip(STRUCT_INPUT.names, plain))
    structs = [
        pa.StructArray.from_arrays([by_name[v], by_name[o]], names=["v", "o0"])
        for v, o in STRUCTS.values()
    ]
    return pa.RecordBatch.from_arrays([*plain, *structs, pa.array(ops, pa.string())], schema=SCHEMA)


def oracle(live: list[tuple], keys: list[str], calls: list[tuple] = CALLS) -> list[tuple]:
    """DuckDB's GROUP BY over the live rows (a global aggregate: one row, even over none).
    ``seq`` (the ORDER BY tie-break of the ordered aggregates) is each row's time: unique."""
    con = duckdb.connect()
    con.execute("SET threads = 1")
    cols = list(zip(*live)) if live else [[]] * 5
    rows = pa.table(  # noqa: F841  (read by DuckDB's replacement scan)
        {
            "ts": pa.array(cols[0], pa.int64()).cast(pa.timestamp("us")),
            "k1": pa.array(cols[1], pa.string()),
            "k2": pa.array(cols[2], pa.int64()),
            "vi": pa.array(cols[3], pa.int64()),
            "vf": pa.array(cols[4], pa.float64()),
            "seq": pa.array(cols[0], pa.int64()),
        }
    )
    aggs = ", ".join(c[4] for c in calls)
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    lead = "".join(f"{k}, " for k in keys)
    return [tuple(r) for r in con.execute(f"SELECT {lead}{aggs} FROM rows{group}").fetchall()]


def as_rows(state: pa.Table | None) -> list[tuple]:
    if state is None:
        return []
    return [tuple(r.values()) for r in state.to_pylist()]


@st.composite
def changelogs(draw: Any) -> list[tuple[list[tuple], list[str]]]:
    """Batches of a consistent changelog: inserts of new rows, and retractions (-U or -D)
    of rows inserted before (sometimes in the same batch)."""
    live: list[tuple] = []
    out = []
    t = 0
    for _ in range(draw(st.integers(0, 12))):
        rows, ops = [], []
        for _ in range(draw(st.integers(1, 8))):
            if live and draw(st.integers(0, 2)) == 0:
                rows.append(live.pop(draw(st.integers(0, len(live) - 1))))
                ops.append(draw(st.sampled_from(["-U", "-D"])))
            else:
                t += 1
                row = (
                    t,
                    draw(st.sampled_from(["a", "b", "c", None])),
                    draw(st.one_of(st.none(), st.integers(0, 2))),
                    draw(st.one_of(st.none(), st.integers(-5, 5))),
                    draw(st.one_of(st.none(), st.integers(-8, 8).map(lambda x: x / 4))),
                )
                rows.append(row)
                ops.append(draw(st.sampled_from(["+I", "+U"])))
                live.append(row)
        out.append((rows, ops))
    return out


def _live_after(batches: list[tuple[list[tuple], list[str]]]) -> list[tuple]:
    live: list[tuple] = []
    for rows, ops in batches:
        for row, op in zip(rows, ops, strict=True):
            if op in ("+I", "+U"):
                live.append(row)
            else:
                live.remove(row)
    return live


@settings(max_examples=30, deadline=None)
@given(log=changelogs(), keys=st.sampled_from(KEYS))
def test_applied_changelog_equals_duckdb_over_the_live_rows_after_every_batch(log, keys):
    op = make(keys)
    state = None
    for i, (rows, ops) in enumerate(log):
        for out in op.on_batch(batch(rows, ops)):
            assert out.schema == op.output_schema
            state = apply_changelog(state, out)
        live = _live_after(log[: i + 1])
        assert_same_rows(as_rows(state), oracle(live, keys) if keys or live or state else [])


@settings(max_examples=15, deadline=None)
@given(log=changelogs(), keys=st.sampled_from(KEYS[1:]), cut=st.integers(0, 12))
def test_restored_snapshot_continues_the_same_changelog(log, keys, cut):
    a = make(keys)
    outs_a, outs_b = [], []
    for rows, ops in log[:cut]:
        outs_a += a.on_batch(batch(rows, ops))
    b = make(keys)
    b.restore(a.snapshot())
    outs_b = list(outs_a)
    for rows, ops in log[cut:]:
        outs_a += a.on_batch(batch(rows, ops))
        outs_b += b.on_batch(batch(rows, ops))
    assert [x.to_pylist() for x in outs_a] == [x.to_pylist() for x in outs_b]
    assert b.describe() == a.describe()


def test_ops_for_a_hand_made_case():
    calls = [c for c in CALLS if c[2] in ("n", "mn_vi", "s_vi")]
    op = make(["k1"], calls)
    rows = [(1, "a", 0, 5, None), (2, "a", 0, 3, None), (3, "b", 0, 1, None)]
    first = op.on_batch(batch(rows, ["+I", "+I", "+I"]))
    assert [tuple(r.values()) for r in first[0].to_pylist()] == [
        ("a", 2, 8, 3, "+I"),  # k1, count(*), sum(vi), min(vi)
        ("b", 1, 1, 1, "+I"),
    ]
    # a's minimum leaves (the one before it comes back); b's only row leaves: -D, old values
    out = op.on_batch(batch([rows[1], rows[2]], ["-U", "-D"]))
    assert [tuple(r.values()) for r in out[0].to_pylist()] == [
        ("a", 2, 8, 3, "-U"),
        ("a", 1, 5, 5, "+U"),
        ("b", 1, 1, 1, "-D"),
    ]
    assert op.describe() == {"groups": 1}
    # b comes back as a new group
    out = op.on_batch(batch([(4, "b", 0, 7, None)], ["+I"]))
    assert [tuple(r.values()) for r in out[0].to_pylist()] == [("b", 1, 7, 7, "+I")]


def test_gone_groups_are_dropped_from_state():
    op = make(["k2"], [CALLS[0], next(c for c in CALLS if c[0] == "count_distinct")])
    op.SLACK = 4
    rnd = random.Random(3)
    for i in range(40):  # every group lives for one batch
        rows = [(10 * i + j, "a", i, rnd.randint(0, 3), None) for j in range(3)]
        op.on_batch(batch(rows, ["+I"] * 3))
        op.on_batch(batch(rows, ["-D"] * 3))
    assert op.state_size()[0] <= 2 * 4 + 2
    out = op.on_batch(batch([(999, "a", 0, 1, None)], ["+I"]))
    assert [tuple(r.values()) for r in out[0].to_pylist()] == [(0, 1, 1, "+I")]


@pytest.mark.parametrize(
    ("rows", "ops", "why"),
    [
        ([(1, "a", 0, 5, None)], ["-D"], "a row never inserted"),
        ([(1, "a", 0, 5, None), (2, "a", 0, 6, None)], ["+I", "-U"], "a row never inserted"),
        ([(1, "a", 0, 5, float("nan")), (1, "a", 0, 5, float("nan"))], ["+I", "-D"], "NaN"),
        ([(1, "a", 0, 5, float("inf")), (1, "a", 0, 5, float("inf"))], ["+I", "-D"], "infinity"),
    ],
)
def test_retractions_it_cannot_honour_fail_the_query(rows, ops, why):
    calls = [c for c in CALLS if c[2] in ("n", "mn_vi", "nd_vi", "s_vf", "vp_vf")]
    op = make(["k1"], calls)
    with pytest.raises(QueryFailed, match="retracted a row") as info:
        op.on_batch(batch(rows, ops))
    assert why in str(info.value)


def test_an_invalid_op_fails_naming_it():
    op = make(["k1"], CALLS[:1])
    with pytest.raises(QueryFailed, match="invalid _op value 'x'"):
        op.on_batch(batch([(1, "a", 0, 5, None)], ["x"]))


def test_first_and_last_value_are_refused():
    first = next(a for a in AGGS if a[0] == "first_value")
    with pytest.raises(PlanError, match="aggregate first_value cannot take rows back out"):
        make(["k1"], [first])
