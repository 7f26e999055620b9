"""Sources produce only the columns a query reads: generators and Parquet files skip the
others, with the same values in the columns they produce, positions unchanged; a Parquet
column that can reject a row is read (and checked) all the same."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datum_sql as ds
import datum_sql.connectors.generators  # registers the sources
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, RejectedRecords, Source
from datum_sql.connectors.generators import nexmark as nexmark_module
from datum_sql.connectors.generators.nexmark import SCHEMAS
from datum_sql.errors import QueryFailed, SourceError

DATAGEN = pa.schema(
    [("a", pa.int64()), ("s", pa.string()), ("x", pa.float64()), ("ts", pa.timestamp("us"))]
)


def read(source: Source, position: dict[str, Any] | None = None) -> list[Any]:
    async def go() -> list[Any]:
        await source.open(position)
        return [item async for item in source.read()]

    return asyncio.run(go())


def batches(items: list[Any]) -> pa.Table:
    return pa.Table.from_batches([i for i in items if isinstance(i, pa.RecordBatch)])


def source(
    connector: str, columns: tuple[str, ...] | None, schema: pa.Schema | None = None, **opts: Any
) -> Source:
    spec = ConnectorSpec("t", opts, schema=schema, columns=columns)
    return registry.create_source(connector, spec)


@pytest.mark.parametrize("stream", ["bid", "auction", "person"])
def test_nexmark_values_do_not_depend_on_the_columns_read(stream: str) -> None:
    names = SCHEMAS[stream].names
    full = batches(read(source("nexmark", None, stream=stream, rows=70_000, seed=3)))
    for pick in ([names[0]], names[1:3], [names[-1], names[2]], names[::2]):
        columns = tuple(n for n in names if n in pick)
        src = source("nexmark", columns, stream=stream, rows=70_000, seed=3)
        assert src.schema.names == list(columns)
        got = batches(read(src))
        assert got.schema.names == list(columns)
        assert got.equals(full.select(list(columns)))


def test_datagen_values_do_not_depend_on_the_columns_read() -> None:
    opts = {"rows": 70_000, "seed": 5, "fields.s.length": 4}
    full = batches(read(source("datagen", None, DATAGEN, **opts)))
    for columns in (("a",), ("s", "ts"), ("a", "x"), ("x",)):
        got = batches(read(source("datagen", columns, DATAGEN, **opts)))
        assert got.schema.names == list(columns)
        assert got.equals(full.select(list(columns)))


def test_datagen_checks_the_options_of_columns_not_read() -> None:
    with pytest.raises(Exception, match=r"fields\.s\.min"):
        source("datagen", ("a",), DATAGEN, rows=10, **{"fields.s.min": 3})


def test_generator_positions_are_rows_whatever_the_columns() -> None:
    src = source("nexmark", ("price",), stream="bid", rows=100_000, batch_size=30_000)
    items = read(src)
    assert src.position() == {"rows": 100_000}
    tail = read(source("nexmark", ("price",), stream="bid", rows=100_000), {"rows": 60_000})
    whole = batches(items)
    assert batches(tail).equals(whole.slice(60_000))


def test_a_query_generates_only_the_columns_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, ...]] = []
    make_chunk = nexmark_module.NexmarkGenerator.make_chunk

    def spy(self: Any, k: int) -> pa.RecordBatch:
        made.append(tuple(self.columns))
        return make_chunk(self, k)

    monkeypatch.setattr(nexmark_module.NexmarkGenerator, "make_chunk", spy)
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        "CREATE SOURCE bids (WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND) "
        "WITH (connector = 'nexmark', stream = 'bid', rows = '100000')"
    )
    got = ctx.execute_streaming(
        "SELECT auction, price * 908 / 1000 AS euro FROM bids WHERE auction % 123 = 0"
    ).to_arrow()
    # the event-time column stays: the watermark is computed from it
    assert set(made) == {("auction", "price", "date_time")}
    bids = ds.connectors.generators.nexmark_table("bid", 100_000)
    expected = [
        (a, p * 908 // 1000)
        for a, p in zip(bids.column("auction").to_pylist(), bids.column("price").to_pylist())
        if a % 123 == 0
    ]
    assert sorted(zip(got.column("auction").to_pylist(), got.column("euro").to_pylist())) == sorted(
        expected
    )


# -- Parquet ---------------------------------------------------------------------------------


def people(path: Path, name: pa.Array | None = None) -> Path:
    name = name if name is not None else pa.array(["a", "b", "c"])
    pq.write_table(
        pa.table({"id": [1, 2, 3], "score": [1.5, 2.5, 3.5], "age": [30, 40, 50], "name": name}),
        path,
        row_group_size=2,
    )
    return path


def test_parquet_skips_unread_columns_that_cannot_reject_a_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = people(tmp_path / "p.parquet")
    read_columns: list[list[str]] = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        read_columns.append(list(kwargs["columns"]))
        return iter_batches(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    src = source("parquet", ("id", "age"), path=str(path))
    got = batches(read(src))
    assert got.schema.names == ["id", "age"] and src.schema.names == ["id", "age"]
    assert got.column("age").to_pylist() == [30, 40, 50]
    # score (a nullable double as stored) is skipped; name (text: checked for UTF-8) is read
    assert read_columns == [["id", "age", "name"]]
    assert src.position()["done"][0]["path"] == str(path)


def test_parquet_unread_text_column_still_rejects_a_bad_row(tmp_path: Path) -> None:
    raw = pa.array([b"ok", b"b\xff", b"c"], pa.binary()).view(pa.string())
    path = people(tmp_path / "bad.parquet", raw)
    with pytest.raises(SourceError, match=r"bad\.parquet, row group 0, row 2: .*UTF-8"):
        read(source("parquet", ("id",), path=str(path)))
    items = read(
        source(
            "parquet",
            ("id",),
            path=str(path),
            bad_records="dead_letter",
            **{"dead_letter.sink": "dlq"},
        )
    )
    assert batches(items).column("id").to_pylist() == [1, 3]
    (rejected,) = [r for i in items if isinstance(i, RejectedRecords) for r in i.batch.to_pylist()]
    # the dead-letter record shows the whole row, also the columns the query does not read
    assert b'"score": 2.5' in rejected["raw"] and b'"age": 40' in rejected["raw"]


def test_parquet_unread_column_with_a_failing_cast_still_fails(tmp_path: Path) -> None:
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"id": [1, 2], "small": [1, 300]}), path)
    schema = pa.schema([("id", pa.int64()), ("small", pa.int8())])
    with pytest.raises(SourceError, match=r"wide\.parquet.*row 2.*small"):
        read(source("parquet", ("id",), schema, path=str(path)))


def test_parquet_query_through_sql_reads_its_columns(tmp_path: Path) -> None:
    raw = pa.array([b"ok", b"b\xff", b"c"], pa.binary()).view(pa.string())
    path = people(tmp_path / "bad.parquet", raw)
    ctx = ds.Context(state_dir=None)
    ctx.execute(f"CREATE SOURCE p WITH (connector = 'parquet', path = '{path}')")
    q = ctx.execute_streaming("SELECT id, age FROM p")
    with pytest.raises(QueryFailed, match=r"bad\.parquet, row group 0, row 2"):
        q.to_arrow()
