"""A file sink's I/O error says what failed (writing a part, reading a staged file back to
check it, publishing it) and names the file, not only the sink's directory."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from datum_sql.connectors import registry
from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files import sink as file_sink
from datum_sql.errors import SinkError

ROWS = pa.table({"id": pa.array(range(10), pa.int64())})


def _io_error(*args: Any) -> Any:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def _sink(out: Path) -> Any:
    return registry.create_sink("parquet", ConnectorSpec(name="out", options={"path": str(out)}))


def _fail(step: Callable[[Any], Any], out: Path) -> SinkError:
    """Open the sink, write ROWS, then run ``step``: the SinkError it raises."""

    async def run() -> SinkError:
        sink = _sink(out)
        await sink.open(ROWS.schema)
        await sink.write(ROWS.to_batches()[0])
        try:
            with pytest.raises(SinkError) as failed:
                await step(sink)
        finally:
            await sink.close()
        return failed.value

    return asyncio.run(run())


def test_a_staged_file_that_cannot_be_read_back_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_sink, "file_sha256", _io_error)
    error = _fail(lambda sink: sink.pre_commit(1), tmp_path / "out")
    (staged,) = (tmp_path / "out" / "_staging").glob("part-*.parquet")
    assert f"cannot read back staged file {staged}" in str(error)
    assert "cannot write" not in str(error)
    assert "Input/output error" in str(error)


def test_a_check_before_publishing_that_cannot_read_the_file_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def commit(sink: Any) -> None:
        staged = await sink.pre_commit(1)
        monkeypatch.setattr(file_sink, "file_sha256", _io_error)
        await sink.commit(1, staged)

    error = _fail(commit, tmp_path / "out")
    (staged,) = (tmp_path / "out" / "_staging").glob("part-*.parquet")
    assert f"cannot read back staged file {staged}" in str(error)
    assert "cannot write" not in str(error)


def test_a_publish_that_cannot_move_the_file_names_both_places(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def commit(sink: Any) -> None:
        staged = await sink.pre_commit(1)
        monkeypatch.setattr(file_sink.os, "replace", _io_error)
        await sink.commit(1, staged)

    out = tmp_path / "out"
    error = _fail(commit, out)
    (staged,) = (out / "_staging").glob("part-*.parquet")
    assert f"cannot publish staged file {staged} as {out / staged.name}" in str(error)


def test_a_part_that_cannot_be_written_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = _sink(tmp_path / "out")
    monkeypatch.setattr(type(sink), "open_writer", _io_error)

    async def run() -> None:
        await sink.open(ROWS.schema)
        await sink.write(ROWS.to_batches()[0])
        await sink.pre_commit(1)  # the part is written in the background: raised here

    with pytest.raises(SinkError) as failed:
        asyncio.run(run())
    assert f"cannot create part file {tmp_path / 'out' / '_staging'}" in str(failed.value)
