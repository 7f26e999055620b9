"""The callback sink: sync, async and write-method targets; errors wrapped and chained."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa
import pytest

from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, Sink
from datum_sql.errors import PlanError, SinkError

BATCHES = pa.table({"x": [1, 2, 3, 4, 5], "_op": ["+I", "+I", "-U", "+U", "-D"]}).to_batches(2)


def make(obj: Any) -> Sink:
    return registry.create_sink("callback", ConnectorSpec(name="tap", options={}, obj=obj))


def feed(sink: Sink) -> None:
    async def run() -> None:
        await sink.open(BATCHES[0].schema)
        for batch in BATCHES:
            await sink.write(batch)
        await sink.commit(1, await sink.pre_commit(1))
        await sink.close()

    asyncio.run(run())


def test_sync_function_sees_every_batch_with_its_op_column():
    seen: list[pa.RecordBatch] = []
    sink = make(seen.append)
    assert not sink.accepts_changelog and not sink.EXACTLY_ONCE
    feed(sink)
    assert seen == BATCHES
    assert pa.Table.from_batches(seen).column("_op").to_pylist()[2:] == ["-U", "+U", "-D"]
    assert sink.metrics() == {"batches": 3, "rows_written": 5}


def test_async_function_is_awaited():
    seen: list[int] = []

    async def collect(batch: pa.RecordBatch) -> None:
        await asyncio.sleep(0)
        seen.append(batch.num_rows)

    feed(make(collect))
    assert seen == [2, 2, 1]


def test_object_with_write_method():
    class Collector:
        def __init__(self) -> None:
            self.rows = 0

        def write(self, batch: pa.RecordBatch) -> None:
            self.rows += batch.num_rows

        def __call__(self, batch: pa.RecordBatch) -> None:
            raise AssertionError("write() is preferred over calling the object")

    target = Collector()
    feed(make(target))
    assert target.rows == 5


def test_callback_error_is_wrapped_and_chained():
    def explode(batch: pa.RecordBatch) -> None:
        raise ValueError("disk full")

    sink = make(explode)
    with pytest.raises(SinkError, match=r"'tap'.*explode.*ValueError: disk full") as err:
        asyncio.run(sink.write(BATCHES[0]))
    assert isinstance(err.value.__cause__, ValueError)


def test_async_callback_error_is_wrapped_too():
    async def explode(batch: pa.RecordBatch) -> None:
        raise KeyError("k")

    with pytest.raises(SinkError, match="'tap'") as err:
        asyncio.run(make(explode).write(BATCHES[0]))
    assert isinstance(err.value.__cause__, KeyError)


def test_not_callable_is_a_plan_error():
    with pytest.raises(PlanError, match=r"tap.*function"):
        make(42)
    with pytest.raises(PlanError, match="unknown option 'path'"):
        registry.create_sink("callback", ConnectorSpec(name="t", options={"path": "x"}, obj=print))
