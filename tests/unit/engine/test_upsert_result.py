"""An updating result is kept by the upsert key the plan carries: one row per key, the
same rows as the multiset fold and the DuckDB upsert sink, memory following the keys."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import datum_sql as ds
from datum_sql.connectors.duckdb import collapse_changelog
from datum_sql.engine.changelog import (
    DELETE,
    INSERT,
    OP_COLUMN,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    UpsertState,
    apply_changelog,
)
from datum_sql.errors import QueryFailed

ROWS = pa.schema([("k", pa.string()), ("w", pa.int64()), ("n", pa.int64()), ("x", pa.float64())])
CHANGES = ROWS.append(pa.field(OP_COLUMN, pa.string()))


def _changelog(rnd: random.Random, batches: int, keys: int) -> list[pa.RecordBatch]:
    """What an aggregate emits: +I for a new key, -U old/+U new for a changed one, -D to
    remove one; NULL keys and values included."""
    live: dict[tuple, tuple] = {}
    out = []
    for _ in range(batches):
        rows: list[tuple] = []
        for _ in range(rnd.randint(0, 40)):
            key = (rnd.choice([None, *map(str, range(keys))]), rnd.randint(0, 2))
            value = (rnd.randint(0, 9), rnd.choice([None, 0.5, -0.0, 0.0]))
            old = live.get(key)
            if old is None:
                rows.append((*key, *value, INSERT))
                live[key] = value
            elif rnd.random() < 0.2:
                rows.append((*key, *old, DELETE))
                del live[key]
            else:
                rows += [(*key, *old, UPDATE_BEFORE), (*key, *value, UPDATE_AFTER)]
                live[key] = value
        cols = list(zip(*rows, strict=True)) if rows else [[] for _ in CHANGES]
        out.append(pa.record_batch([pa.array(c, f.type) for c, f in zip(cols, CHANGES)], CHANGES))
    return out


def _sorted(table: pa.Table) -> list[tuple]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


@pytest.mark.parametrize("seed", range(6))
def test_upsert_state_equals_the_multiset_fold_and_the_duckdb_rule(seed: int) -> None:
    rnd = random.Random(seed)
    batches = _changelog(rnd, 60, keys=8)
    state = UpsertState(ROWS, ("k", "w"))
    state.SLACK = 4  # compact the store and the key index often
    folded = None
    for b in batches:
        state.apply(b)
        folded = apply_changelog(folded, b)
        assert _sorted(state.table()) == _sorted(folded)
        assert state.num_rows == state.table().num_rows
        assert state._store_rows <= 2 * state.num_rows + 4 + b.num_rows  # bounded by keys
    # the DuckDB sink's rule: the last op of each key wins
    upserts, deletes = collapse_changelog(pa.Table.from_batches(batches), ["k", "w"])
    assert not set(_sorted(deletes.select(["k", "w"]))) & {r[:2] for r in _sorted(upserts)}
    assert _sorted(state.table()) == _sorted(upserts)


def test_latest_is_the_last_live_keys_and_the_order_is_first_appearance() -> None:
    state = UpsertState(ROWS, ("k", "w"))
    ins = [("a", 0, 1, None, INSERT), ("b", 0, 1, None, INSERT), ("c", 0, 1, None, INSERT)]
    upd = [("a", 0, 1, None, UPDATE_BEFORE), ("a", 0, 2, None, UPDATE_AFTER),
           ("c", 0, 1, None, DELETE)]  # fmt: skip
    for rows in (ins, upd):
        cols = list(zip(*rows, strict=True))
        state.apply(pa.record_batch([pa.array(c, f.type) for c, f in zip(cols, CHANGES)], CHANGES))
    assert state.table().column("k").to_pylist() == ["a", "b"]
    assert state.table().column("n").to_pylist() == [2, 1]
    assert state.latest(1).column("k").to_pylist() == ["b"]
    assert state.latest(0).num_rows == 0


def test_an_invalid_op_fails_loudly() -> None:
    state = UpsertState(ROWS, ("k",), name="query 'q1'")
    bad = pa.record_batch([pa.array(["a"]), pa.array([0]), pa.array([1]), pa.array([0.5]),
                           pa.array(["+X"])], CHANGES)  # fmt: skip
    with pytest.raises(QueryFailed, match=r"q1.*'\+X'"):
        state.apply(bad)


def test_a_null_op_fails_loudly_and_every_valid_op_is_told_apart() -> None:
    state = UpsertState(ROWS, ("k",), name="query 'q1'")
    ops = ["+I", "-U", "+U", "-D", "+I"]
    good = pa.record_batch([pa.array(["a", "a", "b", "b", "c"]), pa.array([0] * 5),
                            pa.array([1, 2, 3, 4, 5]), pa.array([0.5] * 5), pa.array(ops)],
                           CHANGES)  # fmt: skip
    state.apply(good)
    assert state.table().column("k").to_pylist() == ["c"]  # a: -U last, b: -D last
    bad = pa.record_batch([pa.array(["a"]), pa.array([0]), pa.array([1]), pa.array([0.5]),
                           pa.array([None], pa.string())], CHANGES)  # fmt: skip
    with pytest.raises(QueryFailed, match=r"q1.*invalid _op value None"):
        state.apply(bad)


def _ctx() -> ds.Context:
    ctx = ds.Context(state_dir=None)
    start = dt.datetime(2024, 1, 1)
    n = 5000
    rng = np.random.default_rng(0)
    t = pa.table({
        "k": rng.integers(0, 300, n),
        "v": rng.integers(-50, 50, n),
        "ts": pa.array([start + dt.timedelta(milliseconds=10 * i) for i in range(n)]),
    })  # fmt: skip
    ctx.register_arrow("t", t, event_time="ts", batch_size=97,
                       watermark=ds.BoundedOutOfOrderness(milliseconds=100))  # fmt: skip
    ctx.register_arrow("tt", t)
    return ctx


KEYED = {
    "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k": (("k",),),
    "SELECT k AS kk, max(v) AS top FROM t GROUP BY k HAVING max(v) > 40": (("kk",),),
    "SELECT s, k FROM (SELECT k, sum(v) AS s FROM t GROUP BY k) WHERE s > 0": (("k",),),
    "SELECT count(*) AS n, sum(v) AS s FROM t": ((),),
    "SELECT window_start, k, count(*) AS n FROM tumble(t, ts, INTERVAL '1 second') "
    "GROUP BY window_start, window_end, k": (("window_start", "k"),),
    "SELECT window_end, k, count(*) AS n FROM hop(t, ts, INTERVAL '1 second', "
    "INTERVAL '3 seconds') GROUP BY window_start, window_end, k": (("window_end", "k"),),
    "SELECT window_start, window_end, k, sum(v) AS s FROM session(t, ts, INTERVAL '200 "
    "milliseconds') GROUP BY window_start, window_end, k": (
        ("window_start", "k"),
        ("window_end", "k"),
    ),
    # cumulate's windows share their start: only the end tells them apart
    "SELECT window_start, window_end, k, count(*) AS n FROM cumulate(t, ts, INTERVAL "
    "'1 second', INTERVAL '4 seconds') GROUP BY window_start, window_end, k": (
        ("window_end", "k"),
    ),
    "SELECT window_start, k, count(*) AS n FROM cumulate(t, ts, INTERVAL '1 second', "
    "INTERVAL '4 seconds') GROUP BY window_start, window_end, k": (),
    # top-N: by partition and rank; by partition when it keeps one row
    "SELECT k, v, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn "
    "FROM t) WHERE rn <= 3": (("k", "rn"),),
    "SELECT k, ts, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn "
    "FROM t) WHERE rn = 1": (("k",),),
    "SELECT k, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts) AS rn "
    "FROM t) WHERE rn <= 2": (),
    # no key survives: applied as a multiset
    "SELECT sum(v) AS s FROM t GROUP BY k": (),
    "SELECT k + 1 AS k1, count(*) AS n FROM t GROUP BY k": (),
}


@pytest.mark.parametrize("sql", list(KEYED))
def test_the_plan_carries_the_key_and_the_result_equals_the_batch_answer(sql: str) -> None:
    ctx = _ctx()
    graph = ctx.prepare(sql).graph
    assert graph.sinks[0].upsert_keys == KEYED[sql]
    got = ctx.execute_streaming(sql).to_arrow()
    want = ctx.sql(sql.replace("FROM t ", "FROM tt ").replace("(t,", "(tt,"))
    if "(t," in sql:  # batch windows over t: what it holds
        want = ctx.sql(sql)
    assert _sorted(got) == _sorted(want.select(got.column_names))


def test_a_late_reader_and_a_restored_view_get_the_keyed_state(tmp_path: Path) -> None:
    sql = "SELECT k, count(*) AS n FROM t GROUP BY k"
    ctx = _ctx()
    q = ctx.execute_streaming(sql, max_pending_rows=500)  # the changelog outgrows it
    assert q.wait(60)
    replayed = pa.Table.from_batches(list(q))
    assert set(replayed.column(OP_COLUMN).to_pylist()) == {INSERT}
    assert _sorted(replayed.drop_columns([OP_COLUMN])) == _sorted(q.to_arrow())
    assert q.to_arrow().num_rows == 300


def test_an_upsert_sink_whose_primary_key_misses_a_group_key_is_refused(tmp_path: Path) -> None:
    ctx = _ctx()
    db = tmp_path / "out.duckdb"
    ctx.register_append_sink("by_w", ds.DuckDBSink(db, "r", primary_key="k"))
    sql = (
        "SELECT window_start, window_end, k, count(*) AS n FROM tumble(t, ts, INTERVAL '1 second') "
    )
    sql += "GROUP BY window_start, window_end, k"
    with pytest.raises(ds.PlanError, match=r"by_w.*primary_key \(k\).*'window_start, k' or"):
        ctx.execute_streaming(f"INSERT INTO by_w {sql}")
    ctx.register_append_sink("ok", ds.DuckDBSink(db, "r2", primary_key="window_end, k, n"))
    assert ctx.execute_streaming(f"INSERT INTO ok {sql}").wait(60)
    with duckdb.connect(str(db)) as con:
        got = con.sql("SELECT * FROM r2").to_arrow_table()
    assert _sorted(got) == _sorted(ctx.execute_streaming(sql).to_arrow().select(got.column_names))


def test_the_last_op_of_each_key_is_found_and_the_scratch_left_clean() -> None:
    from datum_sql.engine.changelog import _last_of_each

    rng = np.random.default_rng(1)
    for n_slots, n in ((50, 200), (10**6, 300)):  # slots few beside the rows, then many
        slots = rng.integers(0, n_slots, n)
        want = {int(s): i for i, s in enumerate(slots)}
        scratch = np.full(n_slots, -1, np.int64)
        touched, rows = _last_of_each(slots, scratch)
        assert dict(zip(touched.tolist(), rows.tolist(), strict=True)) == want
        assert list(rows) == sorted(want.values())  # in order of the last occurrences
        assert (scratch == -1).all()


def test_op_codes_read_off_the_buffers_agree_with_arrows_lookup() -> None:
    from datum_sql.engine.changelog import _ALL_OPS, op_codes

    rng = np.random.default_rng(2)
    ops = pa.array(np.array(_ALL_OPS.to_pylist())[rng.integers(0, 4, 500)].tolist())
    want = np.asarray(pc.index_in(ops, _ALL_OPS))
    for arr in (ops, ops.cast(pa.large_string()), ops.dictionary_encode()):
        assert op_codes(arr, "q").tolist() == want.tolist()
    assert op_codes(ops.slice(7, 400), "q").tolist() == want[7:407].tolist()
    for bad in (["+I", "+X"], ["+I", "+I+I"], ["+I", None], ["+", "-D"]):
        with pytest.raises(QueryFailed, match=r"q: invalid _op value .* in a changelog"):
            op_codes(pa.array(bad, pa.string()), "q")


#: SELECTs whose result is kept by the key numbers of the GROUP BY or top-N making it
NUMBERED = [
    "SELECT k, count(*) AS n, sum(v) AS s FROM t GROUP BY k",
    "SELECT s, k FROM (SELECT k, sum(v) AS s FROM t GROUP BY k)",
    "SELECT count(*) AS n, sum(v) AS s FROM t",
    "SELECT k, v, rn FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn "
    "FROM t) WHERE rn <= 3",
    "SELECT k, ts, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC) AS rn "
    "FROM t) WHERE rn = 1",
]


@pytest.mark.parametrize("sql", NUMBERED)
def test_a_result_kept_by_its_producers_key_numbers_hides_them(sql: str) -> None:
    """The GROUP BY or top-N numbers each changelog row's key (its own state slot); the
    result keeps its rows by that number. No reader sees the number: not to_arrow(), not an
    iterator, not a late reader of the replayed state; the answer is the batch one."""
    from datum_sql.plan.result_keys import KEY_NUMBER

    ctx = _ctx()
    graph = ctx.prepare(sql).graph
    assert graph.sinks[0].config.get("key_column") == KEY_NUMBER
    want = _sorted(ctx.sql(sql.replace("FROM t", "FROM tt")))
    q = ctx.execute_streaming(sql)
    changes = pa.Table.from_batches(list(q))
    assert KEY_NUMBER not in changes.column_names
    assert _sorted(apply_changelog(None, changes)) == want
    got = q.to_arrow()
    assert KEY_NUMBER not in got.column_names and _sorted(got) == want
    late = ctx.execute_streaming(sql, max_pending_rows=10)
    assert late.wait(60)
    replayed = pa.Table.from_batches(list(late))
    assert KEY_NUMBER not in replayed.column_names
    assert _sorted(replayed.drop_columns([OP_COLUMN])) == want


def test_no_key_numbers_past_a_filter_or_a_computed_key() -> None:
    """A filter after the GROUP BY can drop a key's new row and keep its retraction: the
    result keys by its columns then; so it does when its key is computed."""
    ctx = _ctx()
    for sql in [
        "SELECT k AS kk, max(v) AS top FROM t GROUP BY k HAVING max(v) > 40",
        "SELECT s, k FROM (SELECT k, sum(v) AS s FROM t GROUP BY k) WHERE s > 0",
        "SELECT k + 1 AS k1, count(*) AS n FROM t GROUP BY k",
        "SELECT window_start, k, count(*) AS n FROM tumble(t, ts, INTERVAL '1 second') "
        "GROUP BY window_start, window_end, k",
    ]:
        assert "key_column" not in ctx.prepare(sql).graph.sinks[0].config, sql


def test_upsert_state_by_key_numbers_equals_the_keyed_one() -> None:
    rnd = random.Random(3)
    batches = _changelog(rnd, 60, keys=8)
    numbers: dict[tuple, int] = {}
    by_key = UpsertState(ROWS, ("k", "w"))
    by_number = UpsertState(ROWS, ("k", "w"), id_column="__n")
    by_number.SLACK = by_key.SLACK = 4
    for b in batches:
        keys = list(zip(b.column("k").to_pylist(), b.column("w").to_pylist(), strict=True))
        ids = [numbers.setdefault(key, len(numbers)) for key in keys]
        by_key.apply(b)
        by_number.apply(b.add_column(4, "__n", pa.array(ids, pa.int64())))
        assert _sorted(by_number.table()) == _sorted(by_key.table())
    numbered = by_number.numbered()
    assert numbered.column_names == [*ROWS.names, "__n"]
    assert all(numbers[(r["k"], r["w"])] == r["__n"] for r in numbered.to_pylist())


def test_a_restored_materialized_result_kept_by_key_numbers_goes_on(tmp_path: Path) -> None:
    """A checkpointed result keeps its key numbers in the checkpoint: restored, the next
    changes replace the restored rows of their keys."""
    from datum_sql.engine.runtime.results import ResultBuffer
    from datum_sql.plan.result_keys import KEY_NUMBER

    schema = pa.schema([("k", pa.string()), ("n", pa.int64()), (KEY_NUMBER, pa.int64()),
                        (OP_COLUMN, pa.string())])  # fmt: skip
    first = ResultBuffer(schema, bounded=True, key=("k",), key_column=KEY_NUMBER)
    first._result.add(pa.record_batch([pa.array(["a", "b"]), pa.array([1, 2]), pa.array([0, 1]),
                                       pa.array([INSERT, INSERT])], schema=schema))  # fmt: skip
    saved = first.checkpoint_table()
    assert saved.column(KEY_NUMBER).to_pylist() == [0, 1]
    second = ResultBuffer(schema, bounded=True, key=("k",), key_column=KEY_NUMBER)
    second.restore(saved)
    second._result.add(pa.record_batch([pa.array(["a", "a"]), pa.array([1, 5]), pa.array([0, 0]),
                                        pa.array([UPDATE_BEFORE, UPDATE_AFTER])], schema=schema))  # fmt: skip
    assert second.table().to_pylist() == [{"k": "a", "n": 5}, {"k": "b", "n": 2}]
