"""Lookup join of a stream with a bounded table: golden property test against DuckDB's hash
join (inner and LEFT, duplicate and NULL keys), buffering until the table ended, limits,
snapshots."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joins_harness import make, rows, run, stream_steps, ts_array

from datum_sql.engine.operators.joins.lookup import _Positions
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME


def tables(
    stream: list[tuple[Any, Any]], table: list[tuple[Any, Any]]
) -> tuple[pa.Table, pa.Table]:
    lt = pa.table(
        {
            "lid": pa.array(range(len(stream)), pa.int64()),
            "k1": pa.array([r[0] for r in stream], pa.int32()),
            "k2": pa.array([r[1] for r in stream], pa.string()),
        }
    )
    rt = pa.table(
        {
            "rid": pa.array(range(len(table)), pa.int64()),
            "k1": pa.array([r[0] for r in table], pa.int64()),
            "k2": pa.array([r[1] for r in table], pa.large_string()),
            "v": pa.array([f"v{i}" for i in range(len(table))], pa.string()),
        }
    )
    return lt, rt


def config(kind: str, keys: list[str], limit: int | None = None) -> dict[str, Any]:
    schema = pa.schema(
        [("lid", pa.int64()), ("k1", pa.int32()), ("rid", pa.int64()), ("v", pa.string())]
    )
    return {
        "left_keys": keys,
        "right_keys": keys,
        "left_columns": [["lid", "lid"], ["k1", "k1"]],
        "right_columns": [["rid", "rid"], ["v", "v"]],
        "kind": kind,
        "state_limit_rows": limit,
        "schema": schema,
    }


def duckdb_expected(lt: pa.Table, rt: pa.Table, cfg: dict[str, Any]) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("l", lt)
    con.register("r", rt)
    join = "LEFT JOIN" if cfg["kind"] == "left" else "JOIN"
    on = " AND ".join(f"l.{k} = r.{k}" for k in cfg["left_keys"])
    got = con.sql(f"SELECT l.lid, r.rid, r.v FROM l {join} r ON {on}").to_arrow_table()
    return rows(got, "lid", "rid", "v")


#: small ids (looked up by direct address) and far-apart ones (by binary search)
K1 = st.one_of(st.none(), st.integers(0, 4), st.sampled_from([-(2**31), -7, 2**31 - 1]))
K2 = st.sampled_from(["a", "b", None])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(K1, K2), max_size=40),
    st.lists(st.tuples(K1, K2), max_size=15),
    st.sampled_from(["inner", "left"]),
    st.sampled_from([["k1"], ["k1", "k2"], ["k2"]]),
    st.integers(0, 2**32),
    st.one_of(st.none(), st.floats(0, 1)),
)
def test_lookup_join_equals_duckdb(
    stream: list[Any],
    table: list[Any],
    kind: str,
    keys: list[str],
    seed: int,
    restore: float | None,
) -> None:
    lt, rt = tables(stream, table)
    cfg = config(kind, keys)
    steps = stream_steps(lt, rt, random.Random(seed), left_time=None, right_time=None)
    restore_at = None if restore is None else int(restore * (len(steps) - 1))
    if restore_at is not None:
        steps = reread_table_after(steps, restore_at)
    out = run("lookup_join", cfg, lt.schema, rt.schema, steps, restore_at=restore_at)
    assert rows(out, "lid", "rid", "v") == duckdb_expected(lt, rt, cfg)


def reread_table_after(steps: list[Any], restore_at: int) -> list[Any]:
    """What the runtime does on a restore: the table (port 1) is read again from its start."""
    table_so_far = [s for s in steps[: restore_at + 1] if s[0] != "close" and s[1] == 1]
    return steps[: restore_at + 1] + table_so_far + steps[restore_at + 1 :]


def test_a_snapshot_keeps_waiting_stream_rows_but_never_the_table() -> None:
    lt, rt = tables([(1, "a"), (2, "b")], [(1, "a"), (2, "b")])
    cfg = config("inner", ["k1"])
    op = make("lookup_join", cfg, lt.schema, rt.schema)
    op.on_batch(rt.to_batches()[0], 1)
    op.on_batch(lt.to_batches()[0], 0)  # waits: the table has not ended
    restored = make("lookup_join", cfg, lt.schema, rt.schema)
    restored.restore(op.snapshot())
    assert restored.describe() == {
        "table_loaded": False, "table_rows": 0, "stream_rows_buffered": 2,
    }  # fmt: skip
    # the table as it is read after the restart: key 1 now has another partner
    _, changed = tables([], [(1, "a"), (1, "z")])
    restored.on_batch(changed.to_batches()[0], 1)
    out = restored.on_watermark(END_OF_TIME, 1)
    assert rows(pa.Table.from_batches(out), "lid", "rid") == [(0, 0), (0, 1)]


def test_a_restored_join_waits_for_the_table_again() -> None:
    lt, rt = tables([(1, "a")], [(1, "a")])
    cfg = config("left", ["k1"])
    op = make("lookup_join", cfg, lt.schema, rt.schema)
    op.on_batch(rt.to_batches()[0], 1)
    op.on_watermark(END_OF_TIME, 1)
    assert op.describe()["table_loaded"]
    restored = make("lookup_join", cfg, lt.schema, rt.schema)
    restored.restore(op.snapshot())
    assert restored.on_batch(lt.to_batches()[0], 0) == []  # not joined with an empty table
    restored.on_batch(rt.to_batches()[0], 1)
    out = restored.on_watermark(END_OF_TIME, 1)
    assert rows(pa.Table.from_batches(out), "lid", "rid") == [(0, 0)]


def test_stream_rows_wait_for_the_end_of_the_table() -> None:
    lt, rt = tables([(1, "a"), (2, "b")], [(1, "a"), (1, "x"), (2, "b")])
    op = make("lookup_join", config("inner", ["k1"]), lt.schema, rt.schema)
    assert op.on_batch(lt.to_batches()[0], 0) == []
    assert op.on_batch(rt.to_batches()[0], 1) == []
    assert op.describe()["stream_rows_buffered"] == 2
    out = op.on_watermark(END_OF_TIME, 1)
    assert rows(pa.Table.from_batches(out), "lid", "rid") == [(0, 0), (0, 1), (1, 2)]
    # after the table ended, batches are probed at once
    out = op.on_batch(lt.slice(1).to_batches()[0], 0)
    assert rows(pa.Table.from_batches(out), "lid", "rid") == [(1, 2)]
    assert op.state_size()[0] == 3


def test_buffer_limit_fails_naming_the_stream_side() -> None:
    lt, rt = tables([(1, "a")] * 10, [(1, "a")])
    op = make("lookup_join", config("left", ["k1"], limit=5), lt.schema, rt.schema)
    with pytest.raises(QueryFailed, match=r"left input.*limit of 5"):
        op.on_batch(lt.to_batches()[0], 0)


def test_a_lookup_join_needs_keys() -> None:
    lt, rt = tables([], [])
    with pytest.raises(PlanError, match="at least one equality key"):
        make("lookup_join", config("inner", []), lt.schema, rt.schema)


def test_integer_keys_are_probed_without_hashing_the_table_again(monkeypatch) -> None:
    """The positions of integer keys come from the index built with the table; hashing
    the table's whole key set for each probed batch made probing cost the table's size."""
    lt, rt = tables([(1, "a"), (3, "b"), (None, "a"), (2**31 - 1, "c")],
                    [(3, "b"), (1, "a"), (2**31 - 1, "c"), (10**12, "d")])  # fmt: skip
    op = make("lookup_join", config("left", ["k1"]), lt.schema, rt.schema)
    op.on_batch(rt.to_batches()[0], 1)
    op.on_watermark(END_OF_TIME, 1)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("index_in re-hashed the table's keys")

    monkeypatch.setattr(pc, "index_in", refuse)
    out = pa.Table.from_batches(op.on_batch(lt.to_batches()[0], 0))
    assert rows(out, "lid", "rid") == [(0, 1), (1, 0), (2, None), (3, 2)]


@pytest.mark.parametrize(
    "keys",
    [
        pa.array([5, None, 2**64 - 1, 0], pa.uint64()),
        pa.array([5, None, -3, 0], pa.int8()),
        ts_array([5, None, -3, 0]),
        pa.array([5, None, -3, 0], pa.date32()),
        pa.array([5, None, -3, 0], pa.duration("us")),
    ],
)
def test_integer_like_keys_match_exactly(keys: pa.Array) -> None:
    """Every integer-like type looks its keys up bit for bit, NULL matching nothing."""
    lt = pa.table({"lid": pa.array(range(4), pa.int64()), "k1": keys})
    rt = pa.table({"rid": pa.array(range(3), pa.int64()), "k1": keys.take([2, 0, 1]),
                   "v": ["x", "y", "z"]})  # fmt: skip
    cfg = config("left", ["k1"])
    cfg["schema"] = pa.schema(
        [("lid", pa.int64()), ("k1", keys.type), ("rid", pa.int64()), ("v", pa.string())]
    )
    op = make("lookup_join", cfg, lt.schema, rt.schema)
    op.on_batch(rt.to_batches()[0], 1)
    op.on_watermark(END_OF_TIME, 1)
    out = pa.Table.from_batches(op.on_batch(lt.to_batches()[0], 0))
    assert rows(out, "lid", "rid") == [(0, 1), (1, None), (2, 0), (3, None)]


@pytest.mark.parametrize(
    "table",
    [
        [-(2**63), -(2**63) + 2, -(2**63) + 5],  # dense at the bottom of int64
        [2**63 - 6, 2**63 - 1],  # dense at the top
        [0, 3, 2**40],  # sparse: searched in a sorted map
    ],
)
def test_integer_positions_are_exact_at_the_ends_of_int64(table: list[int]) -> None:
    """A dense table of positions is addressed by ``value - lowest``: values far outside
    it (whose difference wraps around int64) must be found nowhere, not somewhere."""
    probes = [-(2**63), -(2**63) + 1, -(2**63) + 2, -1, 0, 3, 2**40, 2**63 - 6, 2**63 - 1]
    positions = _Positions(pa.array(table, pa.int64()))
    pos, found = positions.of(pa.array([*probes, None], pa.int64()))
    found = np.ones(len(pos), np.bool_) if found is None else found
    got = [table[p] if f else None for p, f in zip(pos.tolist(), found.tolist(), strict=True)]
    assert got == [p if p in table else None for p in probes] + [None]
