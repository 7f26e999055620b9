"""The runtime end to end on stateless queries: iteration, handle, errors, backpressure."""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow as pa
import pytest

import datum_sql as ds


def _orders(n: int = 1000) -> pa.Table:
    return pa.table({"id": list(range(n)), "name": [f"n{i}" for i in range(n)]})


@pytest.fixture
def ctx() -> ds.Context:
    return ds.Context(state_dir=None)


@pytest.mark.parametrize("batch_size", [1, 7, 100, 5000])
def test_select_streams_filtered_rows_whatever_the_batch_size(
    ctx: ds.Context, batch_size: int
) -> None:
    ctx.register_arrow("orders", _orders(), batch_size=batch_size)
    with ctx.execute_streaming("SELECT id, upper(name) AS u FROM orders WHERE id >= 200") as q:
        batches = list(q)
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    got = pa.Table.from_batches(batches)
    assert got.column("id").to_pylist() == list(range(200, 1000))
    assert got.column("u").to_pylist()[:2] == ["N200", "N201"]
    assert q.state == "finished"


def test_to_arrow_after_bounded_run_and_status_counts(ctx: ds.Context) -> None:
    ctx.register_arrow("orders", _orders(), batch_size=64)
    q = ctx.execute_streaming("SELECT id * 2 AS x FROM orders WHERE id % 7 = 0")
    table = q.to_arrow()
    assert table.column("x").to_pylist() == [i * 2 for i in range(1000) if i % 7 == 0]
    status = q.status()
    assert status["state"] == "finished"
    assert status["sources"]["orders"]["rows"] == 1000
    assert status["rows_in"] == 1000


def test_insert_into_callback_sink_delivers_every_row(ctx: ds.Context) -> None:
    ctx.register_arrow("orders", _orders(), batch_size=10)
    seen: list[pa.RecordBatch] = []
    ctx.register_append_sink("selected", seen.append)
    q = ctx.execute_streaming("INSERT INTO selected SELECT id FROM orders WHERE id < 25")
    assert q.wait(timeout=30)
    assert pa.Table.from_batches(seen).column("id").to_pylist() == list(range(25))
    assert q.status()["sinks"]["selected"]["rows"] == 25


def test_async_iteration(ctx: ds.Context) -> None:
    ctx.register_arrow("orders", _orders(), batch_size=100)

    async def run() -> int:
        total = 0
        async with ctx.execute_streaming_async("SELECT id FROM orders WHERE id < 500") as q:
            async for batch in q:
                total += batch.num_rows
        return total

    assert asyncio.run(run()) == 500


def test_async_iterator_source_with_explicit_schema(ctx: ds.Context) -> None:
    schema = pa.schema([("v", pa.int64())])

    async def gen():  # type: ignore[no-untyped-def]
        for i in range(5):
            await asyncio.sleep(0)
            yield pa.record_batch({"v": [i, i + 100]}, schema=schema)

    ctx.register_arrow("numbers", gen(), schema=schema)
    with ctx.execute_streaming("SELECT v FROM numbers WHERE v < 100") as q:
        got = sorted(v for b in q for v in b.column("v").to_pylist())
    assert got == [0, 1, 2, 3, 4]


def test_operator_error_surfaces_as_query_failed_with_cause(ctx: ds.Context) -> None:
    ctx.register_arrow("t", pa.table({"s": ["1", "2", "x"]}))
    q = ctx.execute_streaming("SELECT CAST(s AS BIGINT) AS v FROM t")
    with pytest.raises(ds.QueryFailed) as info:
        q.wait(timeout=30)
    assert info.value.__cause__ is not None
    assert info.value.operator is not None and "calc" in info.value.operator
    assert q.status()["state"] == "failed"


def test_callback_error_is_query_failed_naming_the_sink(ctx: ds.Context) -> None:
    ctx.register_arrow("t", _orders(10))

    def boom(batch: pa.RecordBatch) -> None:
        raise RuntimeError("disk full")

    ctx.register_append_sink("out", boom)
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM t")
    with pytest.raises(ds.QueryFailed, match="out"):
        q.wait(timeout=30)


def test_cancel_stops_an_unbounded_query_without_leaking_its_thread(ctx: ds.Context) -> None:
    def forever():  # type: ignore[no-untyped-def]
        i = 0
        while True:
            time.sleep(0.001)
            yield pa.record_batch({"v": [i]})
            i += 1

    ctx.register_arrow("ticks", forever(), schema=pa.schema([("v", pa.int64())]))
    before = threading.active_count()
    q = ctx.execute_streaming("SELECT v FROM ticks")
    first = next(iter(q))
    assert first.num_rows == 1
    q.cancel(timeout=10)
    assert q.done and q.state == "cancelled"
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


def test_slow_consumer_holds_back_the_source(ctx: ds.Context) -> None:
    """Backpressure: a caller that stops reading stops the source soon after."""
    batches, rows = 300, 1000

    def produce():  # type: ignore[no-untyped-def]
        for i in range(batches):
            time.sleep(0.001)
            yield pa.record_batch({"v": list(range(i * rows, (i + 1) * rows))})

    ctx.register_arrow("big", produce(), schema=pa.schema([("v", pa.int64())]))
    q = ctx.execute_streaming("SELECT v FROM big", max_pending_rows=5 * rows)
    it = iter(q)
    first = next(it)  # a consumer is attached; now it stalls
    time.sleep(1.0)
    read = q.status()["sources"]["big"]["rows"]
    assert read <= 10 * rows, f"the source raced ahead of a stalled consumer: {read} rows read"
    rest = sum(b.num_rows for b in it)
    assert first.num_rows + rest == batches * rows
    assert q.status()["sources"]["big"]["rows"] == batches * rows


def test_to_arrow_on_a_running_unbounded_query_refuses_clearly(ctx: ds.Context) -> None:
    def forever():  # type: ignore[no-untyped-def]
        i = 0
        while True:
            time.sleep(0.01)
            yield pa.record_batch({"v": [i]})
            i += 1

    ctx.register_arrow("it", forever(), schema=pa.schema([("v", pa.int64())]))
    q = ctx.execute_streaming("SELECT v FROM it")
    try:
        with pytest.raises(ds.DatumError, match="unbounded"):
            q.to_arrow()
        deadline = time.time() + 10
        while q.status()["rows_out"] < 5 and time.time() < deadline:
            time.sleep(0.01)
    finally:
        q.cancel()
    # once stopped, every row it produced comes back, in order
    kept = q.to_arrow().column("v").to_pylist()
    assert len(kept) >= 5 and kept == list(range(len(kept)))


def test_explain_shows_plan_and_job_graph(ctx: ds.Context) -> None:
    ctx.register_arrow("orders", _orders(5))
    text = ctx.explain("SELECT id FROM orders WHERE id > 2")
    assert "== logical plan ==" in text and "== job graph ==" in text
    assert "Scan(orders)" in text and "calc" in text
