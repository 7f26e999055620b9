"""File sources under a bad-record policy: invalid UTF-8, unparseable rows, values that do
not cast and NULLs in NOT NULL columns fail naming file and line (default), or are skipped
and counted, or go to a dead-letter sink with their raw record, reason and position."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datum_sql as ds
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, RejectedRecords, Source
from datum_sql.connectors.files import chunked
from datum_sql.errors import PlanError, SourceError

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def make_source(fmt: str, path: Path, schema: pa.Schema | None = SCHEMA, **options: Any) -> Source:
    spec = ConnectorSpec(name="inp", options={"path": str(path), **options}, schema=schema)
    return registry.create_source(fmt, spec)


async def drain(source: Source, position: dict[str, Any] | None = None) -> list[Any]:
    await source.open(position)
    return [item async for item in source.read()]


def read_all(source: Source) -> tuple[pa.Table, list[dict[str, Any]]]:
    """The good rows and the rejected records (as dicts) of a whole read."""
    items = asyncio.run(drain(source))
    good = [i for i in items if isinstance(i, pa.RecordBatch)]
    rejected = [r for i in items if isinstance(i, RejectedRecords) for r in i.batch.to_pylist()]
    return pa.Table.from_batches(good, schema=source.schema), rejected


def jsonl(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def ids(table: pa.Table) -> list[int]:
    return table.column("id").to_pylist()


# -- 2. invalid UTF-8 never becomes VARCHAR ---------------------------------------------------

BAD_UTF8 = [b'{"id": 1, "name": "ok"}', b'{"id": 2, "name": "b\xff"}', b'{"id": 3, "name": "c"}']


def test_jsonl_invalid_utf8_fails_naming_file_and_line(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "names.jsonl", BAD_UTF8)
    with pytest.raises(
        SourceError, match=r"names\.jsonl, line 2: column 'name' is not valid UTF-8"
    ):
        read_all(make_source("jsonl", path))


def test_jsonl_invalid_utf8_skipped_rows_are_counted(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "names.jsonl", BAD_UTF8)
    source = make_source("jsonl", path, bad_records="skip")
    good, rejected = read_all(source)
    assert ids(good) == [1, 3]
    assert [r["position"] for r in rejected] == [f"{path}:2"]
    assert rejected[0]["raw"] == BAD_UTF8[1]
    assert source.metrics()["rejected"] == 1 and source.metrics()["rows"] == 2


def test_jsonl_invalid_utf8_nested_in_a_list_is_found(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "tags.jsonl", [b'{"tags": ["a", "b"]}', b'{"tags": ["x", "\xfe"]}'])
    schema = pa.schema([("tags", pa.list_(pa.string()))])
    good, rejected = read_all(make_source("jsonl", path, schema, bad_records="skip"))
    assert good.column("tags").to_pylist() == [["a", "b"]]
    assert [r["reason"] for r in rejected] == ["column 'tags' is not valid UTF-8"]


def test_csv_invalid_utf8_fails_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "names.csv"
    path.write_bytes(b"id,name\n1,ok\n2,b\xff\n3,c\n")
    with pytest.raises(SourceError, match=r"names\.csv, line 3: .*UTF8"):
        read_all(make_source("csv", path))
    good, rejected = read_all(make_source("csv", path, bad_records="skip"))
    assert ids(good) == [1, 3] and [r["position"] for r in rejected] == [f"{path}:3"]


def test_parquet_invalid_utf8_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "names.parquet"
    raw = pa.array([b"ok", b"b\xff", b"c"], pa.binary())
    pq.write_table(pa.table({"id": [1, 2, 3], "name": raw.view(pa.string())}), path)
    with pytest.raises(SourceError, match=r"names\.parquet, row group 0, row 2: .*UTF-8"):
        read_all(make_source("parquet", path))


def test_invalid_utf8_never_reaches_a_sink(tmp_path: Path) -> None:
    """Through SQL: the default fails the query naming the file and line; with skip the
    JSONL and Parquet sinks get only valid rows and read back."""
    path = jsonl(tmp_path / "names.jsonl", BAD_UTF8)
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        f"CREATE SOURCE strict (id BIGINT, name VARCHAR) WITH (connector = 'jsonl', path = '{path}')"
    )
    ctx.execute(f"CREATE SINK out_j WITH (connector = 'jsonl', path = '{tmp_path / 'j'}')")
    q = ctx.execute_streaming("INSERT INTO out_j SELECT id, name FROM strict")
    with pytest.raises(
        ds.QueryFailed, match=r"names\.jsonl, line 2: column 'name' is not valid UTF-8"
    ):
        q.wait(timeout=60)

    ctx.execute(
        f"CREATE SOURCE lenient (id BIGINT, name VARCHAR) WITH (connector = 'jsonl', path = '{path}', "
        "bad_records = 'skip')"
    )
    ctx.execute(f"CREATE SINK out_p WITH (connector = 'parquet', path = '{tmp_path / 'p'}')")
    for sink in ("out_j", "out_p"):
        q = ctx.execute_streaming(f"INSERT INTO {sink} SELECT id, name FROM lenient")
        assert q.wait(timeout=60)
        assert q.status()["sources"]["lenient"]["rejected_rows"] == 1
        got = ctx.sql(f"SELECT id, name FROM {sink} ORDER BY id").to_pylist()
        assert got == [{"id": 1, "name": "ok"}, {"id": 3, "name": "c"}]
    lines = b"".join(p.read_bytes() for p in (tmp_path / "j").glob("*.jsonl")).splitlines()
    assert [json.loads(line)["id"] for line in lines] == [1, 3]


# -- 3. the policy: fail, skip, dead_letter ----------------------------------------------------

MIXED_JSONL = [
    b'{"id": 1, "name": "a"}',
    b'{"id": 2, oops}',
    b"",
    b'{"id": "three", "name": "c"}',
    b'{"id": 4, "name": "d"}',
]
MIXED_CSV = b'id,name\n1,a\n2,b,extra\n\n3,"multi\nline"\nfour,d\n5,e\n'


def test_policy_option_is_checked(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "a.jsonl", [b'{"id": 1}'])
    with pytest.raises(PlanError, match=r"'bad_records' must be one of fail, skip, dead_letter"):
        make_source("jsonl", path, bad_records="ignore")
    with pytest.raises(PlanError, match=r"needs option 'dead_letter.sink'"):
        make_source("csv", path, bad_records="dead_letter")


def test_jsonl_fail_yields_the_rows_before_and_names_line_and_reason(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "mixed.jsonl", MIXED_JSONL)
    source = make_source("jsonl", path)
    seen: list[pa.RecordBatch] = []

    async def run() -> None:
        await source.open(None)
        async for item in source.read():
            seen.append(item)

    with pytest.raises(SourceError) as err:
        asyncio.run(run())
    assert f"{path}, line 2: JSON parse error" in str(err.value)
    assert "bad_records = 'skip' or 'dead_letter'" in str(err.value)
    assert [r["id"] for b in seen for r in b.to_pylist()] == [1]


def test_jsonl_skip_names_every_bad_line(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "mixed.jsonl", MIXED_JSONL)
    good, rejected = read_all(make_source("jsonl", path, bad_records="skip"))
    assert ids(good) == [1, 4]
    assert [r["position"] for r in rejected] == [f"{path}:2", f"{path}:4"]
    assert [r["raw"] for r in rejected] == [MIXED_JSONL[1], MIXED_JSONL[3]]
    assert "JSON parse error" in rejected[0]["reason"] and "'id'" in rejected[1]["reason"]
    assert {r["file"] for r in rejected} == {str(path)}


def test_csv_skip_names_every_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "mixed.csv"
    path.write_bytes(MIXED_CSV)
    good, rejected = read_all(make_source("csv", path, bad_records="skip"))
    assert good.to_pylist() == [
        {"id": 1, "name": "a"},
        {"id": 3, "name": "multi\nline"},
        {"id": 5, "name": "e"},
    ]
    assert [r["position"] for r in rejected] == [f"{path}:3", f"{path}:7"]
    assert [r["raw"] for r in rejected] == [b"2,b,extra", b"four,d"]
    assert "Expected 2 columns, got 3" in rejected[0]["reason"]
    assert rejected[1]["reason"].startswith("column 'id': ")


@pytest.mark.parametrize("policy", ["dead_letter", "DEAD_LETTER"])
def test_dead_letter_through_sql(tmp_path: Path, policy: str) -> None:
    """The dead-letter sink gets raw record, reason, file:line position and the source;
    status counts every input row: processed or rejected. The policy's spelling is free."""
    csv_path = tmp_path / "mixed.csv"
    csv_path.write_bytes(MIXED_CSV)
    ctx = ds.Context(state_dir=None)
    ctx.execute(f"CREATE SINK dlq WITH (connector = 'parquet', path = '{tmp_path / 'dlq'}')")
    ctx.execute(
        f"CREATE SOURCE people (id BIGINT, name VARCHAR) WITH (connector = 'csv', path = '{csv_path}', "
        f"bad_records = '{policy}', dead_letter.sink = 'dlq')"
    )
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO out SELECT id, name FROM people")
    assert q.wait(timeout=60)
    assert ctx.sql("SELECT id FROM out ORDER BY id").column("id").to_pylist() == [1, 3, 5]
    dead = ctx.sql("SELECT raw, reason, position, source FROM dlq ORDER BY position").to_pylist()
    assert [d["raw"] for d in dead] == [b"2,b,extra", b"four,d"]
    assert [d["position"] for d in dead] == [f"{csv_path}:3", f"{csv_path}:7"]
    assert all(d["reason"] for d in dead) and {d["source"] for d in dead} == {"people"}
    status = q.status()["sources"]["people"]
    assert status["rejected_rows"] == 2 and status["rows"] == 3


def test_fail_through_sql_is_query_failed_naming_file_line_reason(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "mixed.jsonl", MIXED_JSONL)
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        f"CREATE SOURCE ev (id BIGINT, name VARCHAR) WITH (connector = 'jsonl', path = '{path}')"
    )
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO out SELECT id FROM ev")
    with pytest.raises(ds.QueryFailed) as err:
        q.wait(timeout=60)
    assert f"{path}, line 2: JSON parse error" in str(err.value)
    assert q.status()["state"] == "failed"
    with pytest.raises(SourceError, match=r"mixed\.jsonl, line 2"):
        ctx.sql("SELECT count(*) FROM ev")


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_bad_rows_across_many_chunks_resume_exactly(
    tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small chunks (so records, quoted line breaks and bad rows straddle chunk ends) and
    small batches: every row is read once, every bad one rejected once, and a resume from
    any position yields exactly the rest of both."""
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 64)
    path = tmp_path / f"many.{fmt}"
    expected: list[dict[str, Any]] = []
    records, bad = [], []  # the file's records; indices of the bad ones
    for i in range(60):
        if i % 7 == 3:
            bad.append(len(records))
            records.append(
                f'x{i},"bad ""{i}"""' if fmt == "csv" else '{"id": ' + str(i) + ', "name": '
            )
            continue
        name = f'n{i}\n"q", {i}' if fmt == "csv" else f"n{i} " * (i % 5)
        expected.append({"id": i, "name": name})
        records.append(f'{i},"n{i}\n""q"", {i}"' if fmt == "csv" else json.dumps(expected[-1]))
    head = "id,name\n" if fmt == "csv" else ""
    data = (head + "".join(r + "\n" for r in records)).encode()
    # the line each bad record starts on
    bad_lines = [1 + (head + "".join(r + "\n" for r in records[:b])).count("\n") for b in bad]
    path.write_bytes(data)

    async def run() -> None:
        source = make_source(fmt, path, bad_records="skip", batch_size=4)
        await source.open(None)
        timeline: list[tuple[dict[str, Any], list[dict[str, Any]], list[str]]] = []
        rows: list[dict[str, Any]] = []
        dead: list[str] = []
        timeline.append((source.position(), [], []))
        async for item in source.read():
            if isinstance(item, RejectedRecords):
                dead.extend(item.batch.column("position").to_pylist())
            else:
                assert item.num_rows <= 4
                rows.extend(item.to_pylist())
            timeline.append((json.loads(json.dumps(source.position())), list(rows), list(dead)))
        assert rows == expected
        assert dead == [f"{path}:{n}" for n in bad_lines]
        for position, rows_before, dead_before in timeline:
            items = await drain(make_source(fmt, path, bad_records="skip", batch_size=4), position)
            rest = [r for i in items if isinstance(i, pa.RecordBatch) for r in i.to_pylist()]
            rest_dead = [
                p for i in items if isinstance(i, RejectedRecords)
                for p in i.batch.column("position").to_pylist()
            ]  # fmt: skip
            assert rows_before + rest == expected, position
            assert dead_before + rest_dead == dead, position

    asyncio.run(run())


def test_a_record_longer_than_a_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunked, "CHUNK_BYTES", 1 << 20)
    path = jsonl(
        tmp_path / "long.jsonl", [b'{"id": 1, "name": "%s"}' % (b"x" * (3 << 20)), b'{"id": 2}']
    )
    good, _ = read_all(make_source("jsonl", path))
    assert ids(good) == [1, 2] and len(good.column("name")[0].as_py()) == 3 << 20


# -- 4. NOT NULL is enforced where rows enter ---------------------------------------------------


def test_not_null_in_create_source_fails_naming_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "n.csv"
    path.write_text("id,name\n1,a\n,b\n3,c\n")
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        f"CREATE SOURCE n (id BIGINT NOT NULL, name VARCHAR) WITH (connector = 'csv', path = '{path}')"
    )
    with pytest.raises(
        SourceError, match=r"n\.csv, line 3: missing value for NOT NULL column 'id'"
    ):
        ctx.sql("SELECT * FROM n")
    ctx.execute(f"CREATE SINK out WITH (connector = 'parquet', path = '{tmp_path / 'out'}')")
    q = ctx.execute_streaming("INSERT INTO out SELECT id, name FROM n")
    with pytest.raises(
        ds.QueryFailed, match=r"n\.csv, line 3: missing value for NOT NULL column 'id'"
    ):
        q.wait(timeout=60)

    ctx.execute(
        f"CREATE SOURCE m (id BIGINT NOT NULL, name VARCHAR) WITH (connector = 'csv', path = '{path}', "
        "bad_records = 'skip')"
    )
    assert ctx.sql("SELECT id FROM m ORDER BY id").column("id").to_pylist() == [1, 3]
    q = ctx.execute_streaming("INSERT INTO out SELECT id, name FROM m")
    assert q.wait(timeout=60)
    assert q.status()["sources"]["m"]["rejected_rows"] == 1


def test_not_null_field_of_a_python_schema_in_jsonl(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "n.jsonl", [b'{"id": 1, "name": "a"}', b'{"id": 2}', b'{"name": "c"}'])
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string(), nullable=False)]
    )
    with pytest.raises(
        SourceError, match=r"n\.jsonl, line 2: missing value for NOT NULL column 'name'"
    ):
        read_all(make_source("jsonl", path, schema))
    good, rejected = read_all(make_source("jsonl", path, schema, bad_records="skip"))
    assert ids(good) == [1] and good.schema == schema
    assert [r["reason"] for r in rejected] == [
        "missing value for NOT NULL column 'name'",
        "missing value for NOT NULL column 'id'",
    ]


def test_parquet_not_null_names_row_group_and_row_and_skip_works(tmp_path: Path) -> None:
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": [1, 2, None, 4, None, 6]}), path, row_group_size=2)
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    with pytest.raises(
        SourceError, match=r"n\.parquet, row group 1, row 3: missing value for NOT NULL column 'id'"
    ):
        read_all(make_source("parquet", path, schema))
    good, rejected = read_all(make_source("parquet", path, schema, bad_records="skip"))
    assert ids(good) == [1, 2, 4, 6]
    assert [r["position"] for r in rejected] == [f"{path}:3", f"{path}:5"]
    assert json.loads(rejected[0]["raw"]) == {"id": None}


def test_parquet_file_declaring_not_null_is_enforced_without_a_declaration(tmp_path: Path) -> None:
    """An undeclared source takes the file's schema, NOT NULL included: a later file of the
    directory with NULLs there is caught."""
    (tmp_path / "in").mkdir()
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    pq.write_table(pa.table({"id": [1, 2]}, schema=strict), tmp_path / "in" / "a.parquet")
    pq.write_table(pa.table({"id": [3, None]}), tmp_path / "in" / "b.parquet")
    with pytest.raises(SourceError, match=r"b\.parquet, row group 0, row 2: missing value"):
        read_all(make_source("parquet", tmp_path / "in", schema=None))


def test_bytea_columns_hold_any_bytes(tmp_path: Path) -> None:
    """Only text columns are checked for UTF-8: a BYTEA column read back keeps its bytes
    (a dead-letter sink's raw records, say)."""
    raw = [b"\xff\xfe", b"ok", b"\xc3"]
    pq.write_table(pa.table({"raw": pa.array(raw, pa.binary())}), tmp_path / "raw.parquet")
    ctx = ds.Context(state_dir=None)
    ctx.execute(
        f"CREATE SOURCE r WITH (connector = 'parquet', path = '{tmp_path / 'raw.parquet'}')"
    )
    assert ctx.sql("SELECT raw FROM r").column("raw").to_pylist() == raw
