"""The subquery join driven directly: stream rows wait for the table's end, come out once
each with their mark; NOT IN's NULL rules; a changelog table is applied at its end; a
snapshot keeps only the waiting rows; limits and a scalar of many rows fail loudly."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from joins_harness import make

from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

STREAM = pa.schema([("k", pa.int64()), ("v", pa.int64())])
TABLE = pa.schema([("tk", pa.int32()), ("x", pa.int64())])


def op(mode: str, left: list[str], right: list[str], **extra: Any) -> Any:
    mark = pa.bool_() if mode != "scalar" else pa.int64()
    config = {
        "mode": mode,
        "left_keys": left,
        "right_keys": right,
        "column": "m",
        "schema": STREAM.append(pa.field("m", mark)),
        **extra,
    }
    table = extra.pop("table_schema", TABLE)
    config.pop("table_schema", None)
    return make("subquery_join", config, STREAM, table)


def stream(k: list[Any], v: list[Any]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(k, pa.int64()), pa.array(v, pa.int64())], schema=STREAM)


def table(tk: list[Any], x: list[Any]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(tk, pa.int32()), pa.array(x, pa.int64())], schema=TABLE)


def marks(batches: list[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    out = pa.Table.from_batches(batches).to_pylist()
    return [(r["k"], r["v"], r["m"]) for r in out]


def test_rows_wait_for_the_table_then_come_out_once_each() -> None:
    j = op("exists", ["k"], ["tk"])
    assert j.on_batch(stream([1, 1, 2, None], [1, 2, 3, 4])) == []
    assert j.on_batch(table([1, 1, 1], [0, 0, 0]), port=1) == []
    assert j.on_watermark(10, port=1) == []
    out = j.on_watermark(END_OF_TIME, port=1)
    assert marks(out) == [(1, 1, True), (1, 2, True), (2, 3, False), (None, 4, False)]
    assert marks(j.on_batch(stream([2], [5]))) == [(2, 5, False)]  # probed at once now


def test_in_follows_sql_null_rules() -> None:
    j = op("in", ["k"], ["tk"])
    j.on_batch(table([1, None], [0, 0]), port=1)
    j.on_close()
    got = marks(j.on_batch(stream([1, 2, None], [0, 0, 0])))
    assert got == [(1, 0, True), (2, 0, None), (None, 0, None)]
    empty = op("in", ["k"], ["tk"])
    empty.on_watermark(END_OF_TIME, port=1)
    assert marks(empty.on_batch(stream([None], [0]))) == [(None, 0, False)]


def test_correlated_in_looks_only_at_the_rows_of_its_keys() -> None:
    """``v IN (SELECT x FROM t WHERE t.tk = s.k)``: the correlation key selects the rows."""
    j = op("in", ["k", "v"], ["tk", "x"])
    j.on_batch(table([1, 1, 2], [5, None, 7]), port=1)
    j.on_close()
    got = marks(j.on_batch(stream([1, 1, 2, 2, 3, 2], [5, 6, 7, 8, 5, None])))
    assert got == [
        (1, 5, True), (1, 6, None), (2, 7, True), (2, 8, False), (3, 5, False), (2, None, None),
    ]  # fmt: skip


def test_a_changelog_table_is_applied_at_its_end() -> None:
    schema = TABLE.append(pa.field("_op", pa.string()))
    j = op("in", ["k"], ["tk"], table_changelog=True, table_schema=schema)
    ops = pa.array(["+I", "+I", "-D"], pa.string())
    batch = table([1, 2, 1], [0, 0, 0])
    j.on_batch(pa.record_batch([*batch.columns, ops], schema=schema), port=1)
    out = j.on_watermark(END_OF_TIME, port=1)
    assert out == []
    assert marks(j.on_batch(stream([1, 2], [0, 0]))) == [(1, 0, False), (2, 0, True)]


def test_a_residual_filters_the_matched_pairs() -> None:
    """``EXISTS (SELECT 1 FROM t WHERE t.tk = s.k AND t.x > s.v)``."""
    residual = pc.field("r.x") > pc.field("l.v")
    j = op("exists", ["k"], ["tk"], residual=residual, residual_left=["v"], residual_right=["x"])
    j.on_batch(table([1, 1, 2], [5, 9, None]), port=1)
    j.on_close()
    got = marks(j.on_batch(stream([1, 1, 1, 2, None], [4, 8, 9, 0, 0])))
    assert got == [(1, 4, True), (1, 8, True), (1, 9, False), (2, 0, False), (None, 0, False)]


def test_scalar_is_the_one_value_or_null_and_many_rows_fail() -> None:
    schema = pa.schema([("avg", pa.int64())])
    j = op("scalar", [], [], table_schema=schema)
    j.on_batch(pa.record_batch([pa.array([7], pa.int64())], schema=schema), port=1)
    j.on_close()
    assert marks(j.on_batch(stream([1, 2], [0, 0]))) == [(1, 0, 7), (2, 0, 7)]
    empty = op("scalar", [], [], table_schema=schema)
    empty.on_watermark(END_OF_TIME, port=1)
    assert marks(empty.on_batch(stream([1], [0]))) == [(1, 0, None)]
    many = op("scalar", [], [], table_schema=schema)
    many.on_batch(pa.record_batch([pa.array([1, 2], pa.int64())], schema=schema), port=1)
    with pytest.raises(QueryFailed, match="a scalar subquery returned 2 rows"):
        many.on_watermark(END_OF_TIME, port=1)


def test_snapshot_keeps_waiting_rows_and_the_table_is_read_again() -> None:
    j = op("exists", ["k"], ["tk"])
    j.on_batch(table([1], [0]), port=1)
    j.on_batch(stream([1, 2], [1, 2]))
    data = j.snapshot()
    again = op("exists", ["k"], ["tk"])
    again.restore(data)
    assert again.state_size()[0] == 2 and again.describe()["table_loaded"] is False
    again.on_batch(table([2], [0]), port=1)  # the table as it is now
    assert marks(again.on_close()) == [(1, 1, False), (2, 2, True)]


def test_waiting_rows_count_against_the_state_limit() -> None:
    j = op("exists", ["k"], ["tk"], state_limit_rows=2)
    j.on_batch(stream([1, 2], [0, 0]))
    with pytest.raises(QueryFailed, match="over its state limit of 2 rows"):
        j.on_batch(stream([3], [0]))


def test_a_config_it_cannot_run_is_refused() -> None:
    with pytest.raises(PlanError, match="mode must be one of"):
        op("semi", ["k"], ["tk"])
    with pytest.raises(PlanError, match="IN: at least one"):
        op("in", [], [])
