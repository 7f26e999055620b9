"""window_aggregate (tumble, hop, cumulate; offsets): golden rule against DuckDB, emit modes, purging, limits."""

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
from datum_sql.errors import QueryFailed
from datum_sql.types import END_OF_TIME

WINDOWS = [  # (kind, size, slide or step, offset)
    ("tumble", 5 * S, None, 0),
    ("tumble", 3 * S // 2, None, 0),
    ("tumble", 5 * S, None, 2 * S),
    ("hop", 6 * S, 2 * S, 0),
    ("hop", 5 * S, 2 * S, 0),  # size not a multiple of slide
    ("hop", 2 * S, 3 * S, 0),  # slide > size: rows in the gaps belong to no window
    ("hop", 5 * S, 3 * S, S),
    ("cumulate", 6 * S, 2 * S, 0),
    ("cumulate", 6 * S, 3 * S, 4 * S),
    ("cumulate", 2 * S, 2 * S, 0),  # one step: tumble
]
KEYS = [[], ["k1"], ["k2"], ["k1", "k2"]]
AGG_SET = st.sampled_from(["all", "numeric"])


@settings(max_examples=60, deadline=None)
@given(
    stream=streams(),
    window=st.sampled_from(WINDOWS),
    keys=st.sampled_from(KEYS),
    emit=st.sampled_from(["window_close", "changelog"]),
    which=AGG_SET,
)
def test_final_result_equals_duckdb(stream, window, keys, emit, which):
    kind, size, slide, offset = window
    config = window_config(kind, size, slide, keys, emit, stream.lateness, which, offset)
    op = make("window_aggregate", config)
    outputs: list[pa.RecordBatch] = []
    emitted: set[tuple] = set()
    for event in events(stream):
        out = call(op, event)
        if emit == "window_close":
            for b in out:
                assert b.schema == op.output_schema
                for row in as_rows(pa.Table.from_batches([b]), window=True):
                    ident = row[: 2 + len(keys)]
                    assert ident not in emitted, f"window emitted twice: {ident}"
                    emitted.add(ident)
                    if event[0] == "wm":  # complete: end + lateness <= watermark
                        assert event[1] == END_OF_TIME or row[1] + stream.lateness <= event[1]
                    else:
                        assert event[0] == "close"
            assert event[0] != "batch" or not out, "EOWC must not emit on a batch"
        outputs += out
    assert op.state_size()[0] == 0
    want = oracle(stream, keys, config["window"], which)
    assert_same_rows(final_rows(op, outputs, window=True), want)


@settings(max_examples=15, deadline=None)
@given(stream=streams(), window=st.sampled_from(WINDOWS), keys=st.sampled_from(KEYS), which=AGG_SET)
def test_changelog_is_current_after_every_batch(stream, window, keys, which):
    """The changelog applied so far equals DuckDB over the rows seen so far."""
    kind, size, slide, offset = window
    config = window_config(kind, size, slide, keys, "changelog", stream.lateness, which, offset)
    op = make("window_aggregate", config)
    state = None
    seen = 0
    for event in events(stream):
        for b in call(op, event):
            state = apply_changelog(state, b)
        if event[0] == "batch":
            seen += event[1].num_rows
            prefix = type(stream)(stream.table.slice(0, seen), [], 0, 0)
            got = as_rows(state, window=True) if state is not None else []
            assert_same_rows(got, oracle(prefix, keys, config["window"], which))


def _simple(emit: str, aggs: list[dict], lateness: int = 0, keys=("k1",), kind="tumble"):
    fields = [("window_start", pa.timestamp("us")), ("window_end", pa.timestamp("us"))]
    fields += [(k, INPUT.field(k).type) for k in keys]
    fields += [(a["output"], a.pop("type")) for a in aggs]
    if emit == "changelog":
        fields.append(("_op", pa.string()))
    config = {
        "window": {"kind": kind, "time_column": "ts", "size_us": 10 * S, "slide_us": None},
        "keys": list(keys),
        "aggregates": aggs,
        "emit": emit,
        "allowed_lateness_us": lateness,
        "state_limit_rows": None,
        "schema": pa.schema(fields),
    }
    return make("window_aggregate", config)


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
    return [
        (r["window_start"].second if r["window_start"] else None, r["k1"], r["m"], r.get("_op"))
        for b in batches
        for r in b.to_pylist()
    ]


def test_changelog_ops_for_a_hand_made_case():
    op = _simple("changelog", [{"func": "max", "input": "vi", "output": "m", "type": pa.int64()}])
    assert _rows(op.on_batch(_batch([(1, "a", 5)]))) == [(0, "a", 5, "+I")]
    assert _rows(op.on_batch(_batch([(2, "a", 7), (3, "b", 1)]))) == [
        (0, "a", 5, "-U"),
        (0, "a", 7, "+U"),
        (0, "b", 1, "+I"),
    ]
    assert op.on_batch(_batch([(4, "a", 6)])) == []  # max unchanged: nothing
    assert _rows(op.on_batch(_batch([(12, "a", 1)]))) == [(10, "a", 1, "+I")]
    assert op.on_watermark(10 * S) == []  # changelog mode: purging emits nothing
    assert op.state_size()[0] == 1


def test_window_close_emits_once_when_complete():
    aggs = [{"func": "count_star", "input": None, "output": "m", "type": pa.int64()}]
    op = _simple("window_close", aggs, lateness=2 * S)
    assert op.on_batch(_batch([(1, "a", 1), (9, "a", 1), (11, "a", 1)])) == []
    assert op.on_watermark(9 * S) == []
    assert op.on_watermark(10 * S) == []  # complete, but within the allowed lateness
    assert op.on_batch(_batch([(8, "a", 1)])) == []  # on time within the lateness
    assert op.describe()["open_windows"] == 2
    assert op.describe()["oldest_open_window_end"] == "1970-01-01 00:00:10"
    assert _rows(op.on_watermark(12 * S)) == [(0, "a", 3, None)]
    assert op.on_watermark(13 * S) == []
    assert op.state_size()[0] == 1
    assert _rows(op.on_watermark(END_OF_TIME)) == [(10, "a", 1, None)]
    assert op.on_close() == []
    assert op.state_size()[0] == 0
    assert op.describe()["oldest_open_window_end"] is None


def test_on_close_flushes_open_windows():
    aggs = [{"func": "count_star", "input": None, "output": "m", "type": pa.int64()}]
    op = _simple("window_close", aggs)
    op.on_batch(_batch([(1, "a", 1), (15, "b", 1)]))
    assert _rows(op.on_close()) == [(0, "a", 1, None), (10, "b", 1, None)]


@pytest.mark.parametrize("emit", ["window_close", "changelog"])
def test_state_is_purged_as_the_watermark_passes(emit):
    aggs = [{"func": "count_distinct", "input": "vi", "output": "m", "type": pa.int64()}]
    op = _simple(emit, aggs)
    for i in range(50):
        op.on_batch(_batch([(i, f"k{j}", j * i) for j in range(20)]))
        op.on_watermark(i * S)
    rows, size = op.state_size()
    assert 0 < rows <= 2 * (20 + 200)  # one open window: 20 groups + their values
    assert size > 0
    op.on_watermark(100 * S)
    assert op.state_size()[0] == 0


def test_state_limit_fails_the_query_naming_the_operator():
    aggs = [{"func": "count_star", "input": None, "output": "m", "type": pa.int64()}]
    op = _simple("window_close", aggs)
    op.config["state_limit_rows"] = 3
    op._limit = 3
    op.on_batch(_batch([(1, "a", 1), (2, "b", 1), (3, "c", 1)]))
    with pytest.raises(QueryFailed, match=r"'agg'.*state limit of 3") as info:
        op.on_batch(_batch([(4, "d", 1)]))
    assert info.value.operator == "agg"


def test_state_limit_from_config():
    aggs = [{"func": "count_star", "input": None, "output": "m", "type": pa.int64()}]
    fields = [("window_start", pa.timestamp("us")), ("window_end", pa.timestamp("us"))]
    config = {
        "window": {"kind": "tumble", "time_column": "ts", "size_us": S, "slide_us": None},
        "keys": [],
        "aggregates": [{k: v for k, v in a.items() if k != "type"} for a in aggs],
        "emit": "window_close",
        "allowed_lateness_us": 0,
        "state_limit_rows": 2,
        "schema": pa.schema([*fields, ("m", pa.int64())]),
    }
    op = make("window_aggregate", config)
    op.on_batch(_batch([(1, "a", 1), (2, "a", 1)]))
    op.on_watermark(3 * S)  # both closed and purged
    op.on_batch(_batch([(4, "a", 1), (5, "a", 1)]))
    with pytest.raises(QueryFailed, match="state_limit_rows"):
        op.on_batch(_batch([(6, "a", 1)]))


def test_timezone_and_unit_of_the_time_column_are_kept():
    schema = pa.schema([("ts", pa.timestamp("ms", tz="UTC")), ("v", pa.int64())])
    out_schema = pa.schema(
        [
            ("window_start", pa.timestamp("ms", tz="UTC")),
            ("window_end", pa.timestamp("ms", tz="UTC")),
            ("s", pa.int64()),
        ]
    )
    config = {
        "window": {"kind": "tumble", "time_column": "ts", "size_us": 10 * S, "slide_us": None},
        "keys": [],
        "aggregates": [{"func": "sum", "input": "v", "output": "s"}],
        "emit": "window_close",
        "allowed_lateness_us": 0,
        "state_limit_rows": None,
        "schema": out_schema,
    }
    from datum_sql.engine.operators import operator_class

    op = operator_class("window_aggregate")("w", config, [schema])
    batch = pa.record_batch(
        [
            pa.array([1000, 12000, -1], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            pa.array([1, 2, 3]),
        ],
        schema=schema,
    )
    assert op.on_batch(batch) == []
    out = pa.Table.from_batches(op.on_watermark(END_OF_TIME))
    assert out.schema == out_schema
    assert out.column("window_start").cast(pa.int64()).to_pylist() == [-10000, 0, 10000]
    assert out.column("s").to_pylist() == [3, 1, 2]


@pytest.mark.parametrize("emit", ["changelog", "window_close"])
def test_rows_slotted_directly_give_the_grouped_paths_rows(emit, monkeypatch):
    """A tumble whose batches are mostly one group per row slots the rows of the next
    batch directly (no hash group-by first): the same slots, rows and order either way,
    NULL keys and repeated keys included."""
    from datum_sql.engine.operators.windows import aggregate as module

    batches = [
        [(1, "a", 5), (2, "b", 7), (3, None, 1), (12, "c", 2)],
        [(4, "a", 6), (4, "a", 9), (5, None, 3), (13, "d", 4), (13, "c", 1), (14, "c", 8)],
        [(15, "e", 1), (16, "f", 2), (17, None, 9), (21, "a", 3)],
        [(22, "a", 1), (23, "b", 2), (24, "c", 3), (25, "d", 4), (26, "e", 5)],
    ]

    def run(rows_first: float) -> tuple[list, int]:
        monkeypatch.setattr(module, "_ROWS_FIRST", rows_first)
        aggs = [
            {"func": "max", "input": "vi", "output": "m", "type": pa.int64()},
            {"func": "count_star", "input": None, "output": "c", "type": pa.int64()},
        ]
        op = _simple(emit, aggs)
        slotted = 0
        real = op._slot_rows

        def spy(*args):
            nonlocal slotted
            slotted += 1
            return real(*args)

        op._slot_rows = spy
        out = []
        for rows in batches:
            out += op.on_batch(_batch(rows))
            out += op.on_watermark(rows[-1][0] * S - 5 * S)
        out += op.on_watermark(END_OF_TIME)
        return [r for b in out for r in b.to_pylist()], slotted

    direct, slotted = run(0.75)
    grouped, never = run(2.0)
    assert slotted == 2 and never == 0  # after the batches of one group per row
    assert direct == grouped
