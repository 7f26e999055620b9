"""event_time_sort driven directly: rows wait for the watermark, come out in event-time
order (ties in arrival order), survive a snapshot and respect the state limit."""

from __future__ import annotations

import pyarrow as pa
import pytest

from datum_sql.engine.operators import operator_class
from datum_sql.engine.state.codec import encode_state
from datum_sql.errors import CheckpointError, PlanError, QueryFailed
from datum_sql.types import END_OF_TIME

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us"))])


def make(**config: object) -> object:
    return operator_class("event_time_sort")("sort", {"time_column": "ts", **config}, [SCHEMA])


def batch(*rows: tuple[int, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": [r[0] for r in rows],
            "ts": pa.array([r[1] for r in rows]).cast(SCHEMA.field("ts").type),
        },
        schema=SCHEMA,
    )


def ids(out: list[pa.RecordBatch]) -> list[int]:
    return [i for b in out for i in b.column("id").to_pylist()]


def test_rows_wait_for_the_watermark_and_come_out_in_time_order() -> None:
    op = make()
    assert op.on_batch(batch((1, 30), (2, 10), (3, 20))) == []
    assert op.on_watermark(10) == []  # a row at 10 may still arrive: 2 waits
    assert ids(op.on_watermark(21)) == [2, 3]
    assert op.on_batch(batch((4, 30), (5, 25))) == []
    assert ids(op.on_watermark(END_OF_TIME)) == [5, 1, 4]  # 1 and 4 tie: arrival order
    assert op.state_size()[0] == 0


def test_allowed_lateness_holds_rows_longer() -> None:
    op = make(allowed_lateness_us=5)
    op.on_batch(batch((1, 10)))
    assert op.on_watermark(15) == []
    assert ids(op.on_watermark(16)) == [1]


def test_snapshot_and_restore() -> None:
    op = make()
    op.on_batch(batch((1, 30), (2, 10)))
    ids(op.on_watermark(11))
    again = make()
    again.restore(op.snapshot())
    again.on_batch(batch((3, 20)))
    assert ids(again.on_close()) == [3, 1]
    with pytest.raises(CheckpointError, match="state version 7"):
        make().restore(encode_state("event_time_sort", 7, {}, {}))


def test_state_limit_and_config() -> None:
    with pytest.raises(QueryFailed, match="state limit of 2"):
        make(state_limit_rows=2).on_batch(batch((1, 1), (2, 2), (3, 3)))
    with pytest.raises(PlanError, match="not a timestamp input column"):
        make(time_column="id")
