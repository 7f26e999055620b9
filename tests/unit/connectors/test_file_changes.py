"""A file that changes after a query read it: rows appended to it are read when the query
resumes from its checkpoint; a file rewritten in place is reported loudly, never skipped
without a word."""

from __future__ import annotations

import asyncio
import gzip
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datum_sql as ds
from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec, Source
from datum_sql.errors import SourceError

COPY = "INSERT INTO copy SELECT id, name FROM people"


def setup(tmp_path: Path, fmt: str = "csv", path: Path | None = None) -> tuple[ds.Context, Path]:
    """A context on a state directory with ``people`` (a file) and ``copy`` (Parquet)."""
    path = path or tmp_path / "people.csv"
    if not path.exists():
        path.write_text("id,name\n1,ann\n2,bob\n")
    ctx = ds.Context(state_dir=tmp_path / "state")
    ctx.execute(
        f"CREATE SOURCE IF NOT EXISTS people (id BIGINT, name VARCHAR) "
        f"WITH (connector = '{fmt}', path = '{path}')"
    )
    ctx.execute(
        f"CREATE SINK IF NOT EXISTS copy WITH (connector = 'parquet', path = '{tmp_path / 'copy'}')"
    )
    return ctx, path


def run(ctx: ds.Context, **kw: Any) -> Any:
    q = ctx.execute_streaming(COPY, **kw)
    q.wait(timeout=60)
    return q


def copied(ctx: ds.Context) -> list[int]:
    return ctx.sql("SELECT id FROM copy ORDER BY id").column("id").to_pylist()


def rerun_fails(tmp_path: Path) -> str:
    ctx, _ = setup(tmp_path)
    with pytest.raises(ds.QueryFailed) as err:
        run(ctx)
    return str(err.value)


def test_rows_appended_to_a_finished_file_are_read_by_the_next_run(tmp_path: Path) -> None:
    ctx, path = setup(tmp_path)
    run(ctx)
    assert copied(ctx) == [1, 2]
    with path.open("a") as f:
        f.write("3,cid\n4,dan\n")
    again, _ = setup(tmp_path)
    q = run(again)
    assert q.status()["rows_in"] == 2 and copied(again) == [1, 2, 3, 4]
    # and a run with nothing new reads nothing
    third, _ = setup(tmp_path)
    assert run(third).status()["rows_in"] == 0 and copied(third) == [1, 2, 3, 4]


def test_a_grown_last_line_without_a_line_end_is_a_loud_error(tmp_path: Path) -> None:
    path = tmp_path / "people.csv"
    path.write_text("id,name\n1,ann\n2,bo")  # the last line has no line end
    ctx, _ = setup(tmp_path, path=path)
    run(ctx)
    with path.open("a") as f:
        f.write("b\n3,cid\n")  # row 2 was read as "bo"
    message = rerun_fails(tmp_path)
    assert f"{path} changed after this query read it" in message
    assert "its last line, read before it had a line end, was extended" in message
    assert "fresh=True" in message and "--fresh" in message
    # starting over reads the file again (the sink keeps what the first run wrote)
    again, _ = setup(tmp_path)
    run(again, fresh=True)
    assert copied(again) == [1, 1, 2, 2, 3]


def test_a_file_rewritten_in_place_is_a_loud_error(tmp_path: Path) -> None:
    ctx, path = setup(tmp_path)
    run(ctx)
    path.write_text("id,name\n1,ann\n2,bot\n")  # same size, other bytes
    message = rerun_fails(tmp_path)
    assert f"{path} changed after this query read it" in message and "rewritten" in message


def test_a_file_only_touched_or_a_new_file_resumes(tmp_path: Path) -> None:
    ctx, path = setup(tmp_path)
    run(ctx)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    again, _ = setup(tmp_path)
    q = run(again)
    assert q.status()["recovered_from"] is not None and q.status()["rows_in"] == 0
    assert copied(again) == [1, 2]


def test_a_read_file_that_is_deleted_is_fine(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    first = tmp_path / "in" / "a.csv"
    first.write_text("id,name\n1,ann\n")
    ctx, _ = setup(tmp_path, path=tmp_path / "in")
    run(ctx)
    first.unlink()
    (tmp_path / "in" / "b.csv").write_text("id,name\n2,bob\n")
    again, _ = setup(tmp_path, path=tmp_path / "in")
    q = run(again)
    assert q.status()["rows_in"] == 1 and copied(again) == [1, 2]


def test_a_rewritten_parquet_file_is_a_loud_error(tmp_path: Path) -> None:
    path = tmp_path / "people.parquet"
    pq.write_table(pa.table({"id": [1, 2], "name": ["ann", "bob"]}), path)
    ctx, _ = setup(tmp_path, "parquet", path)
    run(ctx)
    pq.write_table(pa.table({"id": [1, 2, 3], "name": ["ann", "bob", "cid"]}), path)
    again, _ = setup(tmp_path, "parquet", path)
    with pytest.raises(ds.QueryFailed, match=r"people\.parquet changed after this query read it"):
        run(again)


def test_rows_appended_to_a_finished_gzip_file_are_read(tmp_path: Path) -> None:
    path = tmp_path / "people.csv.gz"
    path.write_bytes(gzip.compress(b"id,name\n1,ann\n"))
    ctx, _ = setup(tmp_path, path=path)
    run(ctx)
    path.write_bytes(gzip.compress(b"id,name\n1,ann\n2,bob\n"))
    again, _ = setup(tmp_path, path=path)
    assert run(again).status()["rows_in"] == 1 and copied(again) == [1, 2]
    path.write_bytes(gzip.compress(b"id,name\n7,ann\n2,bob\n"))  # rewritten
    third, _ = setup(tmp_path, path=path)
    with pytest.raises(ds.QueryFailed, match=r"people\.csv\.gz changed after this query read it"):
        run(third)


# -- a file being read when the checkpoint was taken --------------------------------------


def source(fmt: str, path: Path) -> Source:
    schema = pa.schema([("id", pa.int64())])
    spec = ConnectorSpec(name="inp", options={"path": str(path), "batch_size": 2}, schema=schema)
    return registry.create_source(fmt, spec)


async def first_batch_position(fmt: str, path: Path) -> dict[str, Any]:
    src = source(fmt, path)
    await src.open(None)
    async for _ in src.read():
        return src.position()
    raise AssertionError("no batch")


async def read_from(fmt: str, path: Path, position: dict[str, Any]) -> list[int]:
    src = source(fmt, path)
    await src.open(position)
    return [i for b in [b async for b in src.read()] for i in b.column("id").to_pylist()]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_file_being_read_may_grow_but_not_change(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"ids.{fmt}"
    rows = [1, 2, 3, 4]

    def text(ids: list[int]) -> str:
        rows = (f"{i}\n" if fmt == "csv" else f'{{"id": {i}}}\n' for i in ids)
        return ("id\n" if fmt == "csv" else "") + "".join(rows)

    path.write_text(text(rows))
    position = asyncio.run(first_batch_position(fmt, path))
    with path.open("a") as f:  # appended to the file being read: read on resume
        f.write(text([5])[3 if fmt == "csv" else 0 :])
    assert asyncio.run(read_from(fmt, path, position)) == [3, 4, 5]
    path.write_text(text([9, 2, 3, 4, 5]))  # rewritten: the rows read are not these
    with pytest.raises(
        SourceError, match=rf"ids\.{fmt} changed after this query read it: it was rewritten"
    ):
        asyncio.run(read_from(fmt, path, position))


def test_a_parquet_file_being_read_may_not_change(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3, 4]}), path)
    position = asyncio.run(first_batch_position("parquet", path))
    assert asyncio.run(read_from("parquet", path, position)) == [3, 4]
    pq.write_table(pa.table({"id": [7, 8, 9, 10, 11]}), path)
    with pytest.raises(SourceError, match=r"ids\.parquet changed after this query read it"):
        asyncio.run(read_from("parquet", path, position))


def test_a_last_line_without_a_line_end_may_not_be_extended(tmp_path: Path) -> None:
    path = tmp_path / "ids.csv"
    path.write_text("id\n1\n2\n3")  # no line end after the last row
    position = asyncio.run(first_batch_position("csv", path))
    with path.open("a") as f:
        f.write("4\n")  # the last row would become 34
    with pytest.raises(SourceError, match=r"its last line, read before it had a line end"):
        asyncio.run(read_from("csv", path, position))
