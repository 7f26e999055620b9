"""File connectors (parquet, csv, jsonl) driven directly: round trips, staging, resume, errors."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import tempfile
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, Sink, Source
from datum_sql.errors import PlanError, SinkError, SourceError

FORMATS = ["parquet", "csv", "jsonl"]

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("price", pa.float64()),
        ("name", pa.string()),
        ("ok", pa.bool_()),
        ("ts", pa.timestamp("us")),
        ("day", pa.date32()),
    ]
)

#: naive UTC, like TIMESTAMP columns
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC).replace(tzinfo=None)


def sample(n: int = 10, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    names = ["plain", "a,b", 'quote "q"', "new\nline", "", None, "ü€", "\x01ctl", "x;y", "tab\t"]
    return pa.table(
        {
            "id": [None if i % 7 == 3 else i for i in ids],
            "price": [None if i % 5 == 4 else i * 1.25 - 3 for i in ids],
            "name": [names[i % len(names)] for i in ids],
            "ok": [None if i % 4 == 2 else i % 2 == 0 for i in ids],
            "ts": [
                None if i % 6 == 5 else T0 + dt.timedelta(microseconds=i * 1_000_123) for i in ids
            ],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids],
        },
        schema=SCHEMA,
    )


def make_sink(fmt: str, path: str, **options: Any) -> Sink:
    return registry.create_sink(fmt, ConnectorSpec(name="out", options={"path": path, **options}))


def make_source(fmt: str, path: str, schema: pa.Schema | None = SCHEMA, **options: Any) -> Source:
    spec = ConnectorSpec(name="inp", options={"path": path, **options}, schema=schema)
    return registry.create_source(fmt, spec)


async def write(sink: Sink, table: pa.Table, chunk: int = 4) -> None:
    for batch in table.to_batches(max_chunksize=chunk):
        await sink.write(batch)


async def checkpoint(sink: Sink, cid: int) -> dict[str, Any]:
    staged = await sink.pre_commit(cid)
    await sink.commit(cid, staged)
    return staged


async def collect(source: Source, position: dict[str, Any] | None = None) -> pa.Table:
    await source.open(position)
    batches = [b async for b in source.read()]
    return pa.Table.from_batches(batches, schema=source.schema)


def read_back(fmt: str, path: str, schema: pa.Schema | None = SCHEMA, **options: Any) -> pa.Table:
    return asyncio.run(collect(make_source(fmt, path, schema, **options)))


def published(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if not n.startswith("_"))


def staging(path: str) -> list[str]:
    return sorted(os.listdir(os.path.join(path, "_staging")))


# -- sinks --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_equals_input(tmp_path, fmt):
    out = str(tmp_path / "out")
    table = sample(25)

    async def run() -> None:
        sink = make_sink(fmt, out, max_file_rows="10")
        await sink.open(SCHEMA)
        await write(sink, table.slice(0, 13))
        await checkpoint(sink, 1)
        await write(sink, table.slice(13))
        await checkpoint(sink, 2)
        await sink.close()

    asyncio.run(run())
    assert read_back(fmt, out).equals(table)
    # 13 rows -> 10 + 3, then 12 rows -> 10 + 2: four parts, named by checkpoint
    names = published(out)
    assert [n[:18] for n in names] == [
        "part-00000001-0000",
        "part-00000001-0001",
        "part-00000002-0000",
        "part-00000002-0001",
    ]
    assert all(n.endswith("." + fmt) for n in names)


def test_parquet_parts_are_plain_parquet(tmp_path):
    out = str(tmp_path / "out")
    table = sample(9)

    async def run() -> None:
        sink = make_sink("parquet", out, compression="zstd")
        await sink.open(SCHEMA)
        await write(sink, table)
        await checkpoint(sink, 7)

    asyncio.run(run())
    assert pq.read_table(os.path.join(out, published(out)[0])).equals(table)


@pytest.mark.parametrize("fmt", FORMATS)
def test_staged_rows_invisible_until_commit(tmp_path, fmt):
    out = str(tmp_path / "out")

    async def run() -> None:
        sink = make_sink(fmt, out)
        await sink.open(SCHEMA)
        await write(sink, sample(6))
        assert (await collect(make_source(fmt, out))).num_rows == 0
        staged = await sink.pre_commit(1)
        assert len(staged["files"]) == 1
        assert staging(out) == staged["files"]
        assert published(out) == []
        assert (await collect(make_source(fmt, out))).num_rows == 0
        await sink.commit(1, staged)
        assert staging(out) == []
        assert published(out) == staged["files"]

    asyncio.run(run())
    assert read_back(fmt, out).equals(sample(6))


@pytest.mark.parametrize("fmt", FORMATS)
def test_abort_discards_unstaged_rows(tmp_path, fmt):
    out = str(tmp_path / "out")

    async def run() -> None:
        sink = make_sink(fmt, out, max_file_rows=4)
        await sink.open(SCHEMA)
        await write(sink, sample(10))  # two closed files and one open
        await sink.abort()
        assert staging(out) == []
        await write(sink, sample(3, start=100))
        await checkpoint(sink, 1)

    asyncio.run(run())
    assert read_back(fmt, out).equals(sample(3, start=100))


@pytest.mark.parametrize("fmt", FORMATS)
def test_commit_is_idempotent_and_finishes_a_partial_commit(tmp_path, fmt):
    out = str(tmp_path / "out")

    async def run() -> dict[str, Any]:
        sink = make_sink(fmt, out, max_file_rows=3)
        await sink.open(SCHEMA)
        await write(sink, sample(8))
        staged = await sink.pre_commit(4)
        assert len(staged["files"]) == 3
        # a crash in the middle of commit: the first file was moved, the rest not
        first = staged["files"][0]
        os.replace(os.path.join(out, "_staging", first), os.path.join(out, first))
        recovered = make_sink(fmt, out, max_file_rows=3)  # a new process, same manifest
        await recovered.commit(4, staged)
        await recovered.commit(4, staged)
        await sink.commit(4, staged)
        return staged

    staged = asyncio.run(run())
    assert published(out) == staged["files"]
    assert read_back(fmt, out).equals(sample(8))


def test_commit_of_lost_staged_file_fails_loudly(tmp_path):
    out = str(tmp_path / "out")

    async def run() -> None:
        sink = make_sink("csv", out)
        await sink.open(SCHEMA)
        await write(sink, sample(2))
        staged = await sink.pre_commit(1)
        os.remove(os.path.join(out, "_staging", staged["files"][0]))
        with pytest.raises(SinkError, match=staged["files"][0]):
            await sink.commit(1, staged)

    asyncio.run(run())


@pytest.mark.parametrize("fmt", FORMATS)
def test_uncommitted_checkpoint_is_carried_by_the_next(tmp_path, fmt):
    """Checkpoint 1 pre-committed but never committed (its manifest was not written):
    checkpoint 2's record still names its files, so committing 2 publishes all rows."""
    out = str(tmp_path / "out")
    table = sample(12)

    async def run() -> None:
        sink = make_sink(fmt, out)
        await sink.open(SCHEMA)
        await write(sink, table.slice(0, 5))
        first = await sink.pre_commit(1)
        await write(sink, table.slice(5))
        second = await sink.pre_commit(2)
        assert set(first["files"]) < set(second["files"])
        await sink.commit(2, second)
        await sink.commit(1, first)  # late and redundant: harmless

    asyncio.run(run())
    assert read_back(fmt, out).equals(table)


def test_discard_uncommitted_keeps_only_the_named_files(tmp_path):
    out = str(tmp_path / "out")

    async def run() -> None:
        sink = make_sink("jsonl", out)
        await sink.open(SCHEMA)
        await write(sink, sample(3))
        kept = await sink.pre_commit(1)
        await write(sink, sample(3, start=50))
        await sink.pre_commit(2)  # its manifest never got written
        await write(sink, sample(1))
        await sink.close()  # rows after the last pre_commit stay staged, like a crash
        assert len(staging(out)) == 3
        restarted = make_sink("jsonl", out)
        await restarted.open(SCHEMA)
        await restarted.discard_uncommitted(set(kept["files"]))
        assert staging(out) == kept["files"]
        await restarted.commit(1, kept)

    asyncio.run(run())
    assert read_back("jsonl", out).equals(sample(3))


def test_empty_checkpoint_publishes_nothing(tmp_path):
    out = str(tmp_path / "out")

    async def run() -> dict[str, Any]:
        sink = make_sink("parquet", out)
        await sink.open(SCHEMA)
        return await checkpoint(sink, 1)

    assert asyncio.run(run()) == {"files": [], "checksums": {}}
    assert published(out) == []


def test_csv_sink_refuses_nested_columns(tmp_path):
    sink = make_sink("csv", str(tmp_path / "out"))
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string()))])
    with pytest.raises(SinkError, match="'tags'"):
        asyncio.run(sink.open(schema))


def test_csv_options_round_trip(tmp_path):
    out = str(tmp_path / "out")
    table = sample(7)

    async def run() -> None:
        sink = make_sink("csv", out, delimiter=";", header="false")
        await sink.open(SCHEMA)
        await write(sink, table)
        await checkpoint(sink, 1)

    asyncio.run(run())
    first = published(out)[0]
    with open(os.path.join(out, first), encoding="utf-8") as f:
        assert f.readline().startswith('0;-3;"plain";true;2024-01-01 00:00:00')
    assert read_back("csv", out, delimiter=";", header=False).equals(table)


@pytest.mark.parametrize("fmt", FORMATS)
def test_single_column_nulls_and_empty_strings_round_trip(tmp_path, fmt):
    """A one-column CSV writes a null as an empty line: it must not be skipped."""
    out = str(tmp_path / "out")
    table = pa.table({"s": ["a", None, "", None, "b"]})

    async def run() -> None:
        sink = make_sink(fmt, out)
        await sink.open(table.schema)
        await write(sink, table)
        await checkpoint(sink, 1)

    asyncio.run(run())
    assert read_back(fmt, out, table.schema).equals(table)


def test_jsonl_nested_and_zoned_values_round_trip(tmp_path):
    out = str(tmp_path / "out")
    table = pa.table(
        {
            "tags": pa.array([["a", "b"], None, []], pa.list_(pa.string())),
            "at": pa.array([0, 1_500_000, None], pa.timestamp("us", "UTC")),
            "nan": [float("nan"), float("inf"), 1.0],
        }
    )

    async def run() -> None:
        sink = make_sink("jsonl", out)
        await sink.open(table.schema)
        await write(sink, table)
        await checkpoint(sink, 1)

    asyncio.run(run())
    got = read_back("jsonl", out, table.schema)
    assert got.select(["tags", "at"]).equals(table.select(["tags", "at"]))
    # JSON has no NaN or infinity: they are written as null
    assert got.column("nan").to_pylist() == [None, None, 1.0]


def test_parquet_compression_is_validated(tmp_path):
    with pytest.raises(PlanError, match=r"'compression'.*'rar'"):
        make_sink("parquet", str(tmp_path), compression="rar")


@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_or_bad_option_is_a_plan_error(tmp_path, fmt):
    with pytest.raises(PlanError, match="'max_rows'"):
        make_sink(fmt, str(tmp_path), max_rows=3)
    with pytest.raises(PlanError, match="'max_file_rows'"):
        make_sink(fmt, str(tmp_path), max_file_rows="many")
    with pytest.raises(PlanError, match="'batchsize'"):
        make_source(fmt, str(tmp_path), batchsize=3)
    with pytest.raises(PlanError, match="'batch_size'"):
        make_source(fmt, str(tmp_path), batch_size=0)


# -- sources ------------------------------------------------------------------------------


def write_files(fmt: str, directory: str, tables: list[pa.Table]) -> None:
    """One committed part per table, through the sink (parquet: small row groups)."""

    async def run() -> None:
        sink = make_sink(fmt, directory)
        await sink.open(SCHEMA)
        for cid, table in enumerate(tables, start=1):
            await write(sink, table)
            await checkpoint(sink, cid)

    asyncio.run(run())
    if fmt == "parquet":  # rewrite with row groups of 4 rows so resuming skips groups
        for name in published(directory):
            path = os.path.join(directory, name)
            pq.write_table(pq.read_table(path), path, row_group_size=4)


@pytest.mark.parametrize("fmt", FORMATS)
def test_resume_from_every_position_yields_exactly_the_rest(tmp_path, fmt):
    directory = str(tmp_path / "in")
    tables = [sample(11), sample(0, start=11), sample(9, start=11), sample(5, start=20)]
    write_files(fmt, directory, tables)
    everything = pa.concat_tables(tables)

    async def run() -> None:
        source = make_source(fmt, directory, batch_size=3)
        await source.open(None)
        seen = 0
        positions = [(source.position(), 0)]
        async for batch in source.read():
            assert batch.num_rows <= 3
            seen += batch.num_rows
            positions.append((source.position(), seen))
        assert seen == everything.num_rows
        for position, done in positions:
            resumed = make_source(fmt, directory, batch_size=3)
            rest = await collect(resumed, position)
            assert rest.equals(everything.slice(done)), position

    asyncio.run(run())


@pytest.mark.parametrize("fmt", FORMATS)
def test_schema_is_inferred_from_the_first_file(tmp_path, fmt):
    directory = str(tmp_path / "in")
    write_files(fmt, directory, [sample(4), sample(4, start=4)])
    source = make_source(fmt, directory, schema=None)
    assert source.schema.names == SCHEMA.names
    assert source.schema.field("id").type == pa.int64()
    table = asyncio.run(collect(source))
    assert table.schema == source.schema
    assert table.column("id").to_pylist() == sample(8).column("id").to_pylist()


def test_declared_columns_select_and_cast(tmp_path):
    directory = str(tmp_path / "in")
    write_files("parquet", directory, [sample(5)])
    schema = pa.schema([("name", pa.string()), ("id", pa.float64())])
    got = read_back("parquet", directory, schema)
    assert got.schema == schema
    assert got.column("id").to_pylist() == [0.0, 1.0, 2.0, None, 4.0]


def test_directory_listing_skips_hidden_underscore_and_other_formats(tmp_path):
    directory = tmp_path / "in"
    directory.mkdir()
    for name, start in [("b.csv", 10), ("a.csv", 0), (".hidden.csv", 50), ("_tmp.csv", 60)]:
        pacsv.write_csv(sample(2, start=start), str(directory / name))
    (directory / "notes.txt").write_text("not data")
    (directory / "sub").mkdir()
    pacsv.write_csv(sample(2, start=70), str(directory / "sub" / "c.csv"))

    def days(table: pa.Table) -> list[int]:
        return [(d - dt.date(2024, 1, 1)).days for d in table.column("day").to_pylist()]

    assert days(read_back("csv", str(directory))) == [0, 1, 10, 11]
    # a glob recurses with ** but still skips underscore names (a sink's _staging)
    (directory / "_staging").mkdir()
    pacsv.write_csv(sample(2, start=80), str(directory / "_staging" / "x.csv"))
    got = read_back("csv", str(directory / "**" / "*.csv"))
    assert days(got) == [0, 1, 10, 11, 70, 71]
    # a single file is read whatever its name
    pacsv.write_csv(sample(2, start=90), str(tmp_path / "export.txt"))
    assert days(read_back("csv", str(tmp_path / "export.txt"))) == [90, 91]


def test_missing_path_names_the_path(tmp_path):
    missing = str(tmp_path / "nope" / "x.parquet")
    with pytest.raises(SourceError, match="nope"):
        make_source("parquet", missing)


def test_empty_directory_needs_declared_columns(tmp_path):
    with pytest.raises(SourceError, match="declare the columns"):
        make_source("jsonl", str(tmp_path), schema=None)
    assert read_back("jsonl", str(tmp_path)).num_rows == 0


def test_resume_reads_a_new_file_whatever_its_name(tmp_path):
    directory = tmp_path / "in"
    write_files("csv", str(directory), [sample(3), sample(3, start=3)])

    async def run() -> list[int]:
        source = make_source("csv", str(directory))
        await source.open(None)
        async for _ in source.read():
            break
        position = source.position()
        pacsv.write_csv(sample(1, start=100), str(directory / "a-first.csv"))  # sorts first
        again = make_source("csv", str(directory))
        await again.open(position)
        return [i for b in [b async for b in again.read()] for i in b.column("id").to_pylist()]

    # the other file of the listing, then the new one (modification order)
    assert asyncio.run(run()) == [None, 4, 5, 100]


# -- bad input ----------------------------------------------------------------------------


def test_csv_wrong_field_count_names_file_and_row(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,name\n1,a\n2,b\n3,c,extra\n4,d\n")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    with pytest.raises(SourceError, match=r"bad\.csv, line 4: .*Expected 2 columns, got 3"):
        read_back("csv", str(path), schema)


def test_csv_bad_value_names_file_column_and_row(tmp_path):
    path = tmp_path / "prices.csv"
    rows = "".join(f"{i},{i * 2}\n" for i in range(5000))
    path.write_text("id,price\n" + rows + "5000,twelve\n")
    schema = pa.schema([("id", pa.int64()), ("price", pa.int64())])
    with pytest.raises(SourceError, match=r"prices\.csv, line 5002: column 'price'.*twelve"):
        read_back("csv", str(path), schema)


def test_csv_missing_declared_column_names_it(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("id\n1\n")
    schema = pa.schema([("id", pa.int64()), ("qty", pa.int64())])
    with pytest.raises(SourceError, match=r"a\.csv.*qty"):
        read_back("csv", str(path), schema)


HEADERS = [
    b"id,name\n",
    b"id,name\r\n",
    b'"id","na,me"\n',
    b'id,"say ""hi"""\n',
    b'id,"two\nlines",x\n',
    b'"q"tail,a"b,\n',  # after a closing quote, and inside an unquoted field: text
    b" id , name \n",
    b"id,,\xc3\xbc\n",
]


@pytest.mark.parametrize("line", HEADERS)
@pytest.mark.parametrize("delimiter", [",", ";"])
def test_csv_header_names_are_read_as_pyarrow_reads_them(line, delimiter):
    from datum_sql.connectors.files.csv import header_names

    line = line.replace(b",", delimiter.encode())
    parse = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    expected = pacsv.read_csv(pa.BufferReader(line), parse_options=parse).column_names
    assert header_names(line, delimiter) == expected


def test_csv_header_without_a_line_end_fails_as_in_pyarrow(tmp_path):
    from datum_sql.connectors.files.csv import header_names

    with pytest.raises(pa.ArrowInvalid):
        pacsv.read_csv(pa.BufferReader(b"id,name"))
    with pytest.raises(ValueError, match="no line end"):
        header_names(b"id,name", ",")
    path = tmp_path / "a.csv"
    path.write_bytes(b"id,name")
    with pytest.raises(SourceError, match=r"a\.csv: its header line has no line end"):
        read_back("csv", str(path), pa.schema([("id", pa.int64())]))


def test_csv_quoted_header_with_a_bom_and_the_delimiter_in_a_name(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b'\xef\xbb\xbf"id";"unit; price"\r\n1;2.5\r\n')
    schema = pa.schema([("id", pa.int64()), ("unit; price", pa.float64())])
    got = read_back("csv", str(path), schema, delimiter=";")
    assert got.to_pylist() == [{"id": 1, "unit; price": 2.5}]


def test_csv_header_that_is_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"id,\xff\n1,2\n")
    with pytest.raises(SourceError, match=r"a\.csv"):
        read_back("csv", str(path), pa.schema([("id", pa.int64())]))


def test_jsonl_malformed_line_names_file_and_row(tmp_path):
    path = tmp_path / "events.jsonl"
    lines = [f'{{"id": {i}, "pad": "{"x" * 200}"}}\n' for i in range(30000)]
    lines[25000] = '{"id": 25000, oops}\n'
    path.write_text("".join(lines))
    schema = pa.schema([("id", pa.int64())])
    with pytest.raises(SourceError, match=r"events\.jsonl, line 25001: "):
        read_back("jsonl", str(path), schema)


def test_jsonl_wrong_type_names_file_column_and_row(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}\n{"id": "three"}\n')
    with pytest.raises(SourceError, match=r"e\.jsonl, line 3: .*column 'id'"):
        read_back("jsonl", str(path), pa.schema([("id", pa.int64())]))


def test_jsonl_bad_date_names_the_row_via_the_cast(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"day": "2024-01-01"}\n{"day": "2024-13-01"}\n')
    with pytest.raises(SourceError, match=r"d\.jsonl, line 2: column 'day': .*2024-13-01"):
        read_back("jsonl", str(path), pa.schema([("day", pa.date32())]))


def test_parquet_garbage_file_names_the_file(tmp_path):
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"this is not parquet at all")
    with pytest.raises(SourceError, match=r"broken\.parquet"):
        make_source("parquet", str(path), schema=None)
    with pytest.raises(SourceError, match=r"broken\.parquet"):
        read_back("parquet", str(path))


def test_parquet_missing_declared_column_names_it(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [1]}), str(path))
    with pytest.raises(SourceError, match=r"t\.parquet has no column 'qty'"):
        read_back("parquet", str(path), pa.schema([("id", pa.int64()), ("qty", pa.int64())]))


# -- property: any batching, file size and checkpointing round-trips ------------------------

rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.none(), st.text(max_size=8)),
    ),
    max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt=st.sampled_from(FORMATS),
    data=rows,
    chunk=st.integers(1, 7),
    max_file_rows=st.integers(1, 9),
    checkpoints=st.sets(st.integers(0, 40), max_size=4),
)
def test_any_batching_round_trips(fmt, data, chunk, max_file_rows, checkpoints):
    schema = pa.schema([("n", pa.int64()), ("s", pa.string())])
    table = pa.table({"n": [r[0] for r in data], "s": [r[1] for r in data]}, schema=schema)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")

        async def run() -> None:
            sink = make_sink(fmt, out, max_file_rows=max_file_rows)
            await sink.open(schema)
            cid = 0
            for start in range(0, table.num_rows, chunk):
                await sink.write(table.slice(start, chunk).to_batches()[0])
                if start in checkpoints:
                    cid += 1
                    await checkpoint(sink, cid)
            await checkpoint(sink, cid + 1)

        asyncio.run(run())
        assert read_back(fmt, out, schema).equals(table)
