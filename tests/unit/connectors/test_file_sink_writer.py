"""A file sink writes its part files in a thread of its own: ``write`` hands the batch over
and returns (waiting only while the queue is full), so writing overlaps with processing.
Staging and publishing wait for every queued batch; a failed write fails the next call,
naming the file, and nothing damaged is ever published."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datum_sql as ds
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files import parquet as parquet_module
from datum_sql.connectors.files.sink import QUEUED_BATCHES
from datum_sql.errors import QueryFailed, SinkError

BATCH = pa.record_batch({"id": pa.array(range(100), pa.int64())})


def sink(out: Path, fmt: str = "parquet") -> Any:
    return registry.create_sink(fmt, ConnectorSpec(name="out", options={"path": str(out)}))


class _Gate:
    """Holds the writer thread inside ``write`` until opened."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        write = parquet_module._ParquetWriter.write

        def held(writer: Any, batch: pa.RecordBatch) -> None:
            self.entered.set()
            assert self.open.wait(60)
            write(writer, batch)

        monkeypatch.setattr(parquet_module._ParquetWriter, "write", held)


def test_write_returns_while_the_part_is_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _Gate(monkeypatch)
    out = sink(tmp_path / "out")

    async def run() -> dict[str, Any]:
        await out.open(BATCH.schema)
        try:
            # the writer thread is stuck in the first batch; the queue takes the others
            for _ in range(QUEUED_BATCHES + 1):
                await asyncio.wait_for(out.write(BATCH), timeout=30)
            assert gate.entered.wait(30)
        finally:
            gate.open.set()
        staged = await out.pre_commit(1)
        await out.commit(1, staged)
        await out.close()
        return staged

    staged = asyncio.run(run())
    (name,) = staged["files"]
    table = pq.read_table(tmp_path / "out" / name)
    assert table.num_rows == 100 * (QUEUED_BATCHES + 1)
    assert table.column("id").to_pylist() == list(range(100)) * (QUEUED_BATCHES + 1)


def test_a_failed_background_write_fails_the_next_call_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    write = parquet_module._ParquetWriter.write

    def failing(writer: Any, batch: pa.RecordBatch) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        write(writer, batch)

    monkeypatch.setattr(parquet_module._ParquetWriter, "write", failing)
    out = sink(tmp_path / "out")

    async def run() -> None:
        await out.open(BATCH.schema)
        for _ in range(3):
            await out.write(BATCH)
        try:
            await out.pre_commit(1)
        finally:
            with pytest.raises(SinkError):
                await out.close()

    with pytest.raises(SinkError) as failed:
        asyncio.run(run())
    message = str(failed.value)
    assert "cannot write part file" in message and str(tmp_path / "out" / "_staging") in message
    assert "No space left on device" in message
    assert not list((tmp_path / "out").glob("part-*")), "nothing may be published"


def test_a_query_whose_sink_write_fails_fails_loudly_and_publishes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    write = parquet_module._ParquetWriter.write

    def failing(writer: Any, batch: pa.RecordBatch) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(5, "Input/output error")
        write(writer, batch)

    monkeypatch.setattr(parquet_module._ParquetWriter, "write", failing)
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", pa.table({"id": pa.array(range(10_000), pa.int64())}), batch_size=1000)
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM t")
    with pytest.raises(QueryFailed, match=r"cannot write part file .*_staging.*\.parquet"):
        q.wait(timeout=120)
    assert not list((tmp_path / "out").glob("part-*"))


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_every_queued_row_is_published_in_order(tmp_path: Path, fmt: str) -> None:
    ctx = ds.Context(state_dir=None)
    ctx.register_arrow("t", pa.table({"id": pa.array(range(50_000), pa.int64())}), batch_size=997)
    ctx.execute(f"CREATE SINK out WITH (connector = '{fmt}', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM t")
    assert q.wait(timeout=120)
    assert ctx.sql("SELECT id FROM out").column("id").to_pylist() == list(range(50_000))
