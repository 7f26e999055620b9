"""The bounded file source all formats share: listing, positions, resuming, casting, errors.

A format supplies three hooks: infer a file's schema, open a file as an iterator of raw
Arrow batches, and (optionally) turn a reader error into a message naming the row. The
blocking reads run in a worker thread so a large file never stalls the event loop.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import pyarrow as pa

from datum_sql.connectors.base import ConnectorSpec, Source, SourceItem
from datum_sql.connectors.files.common import first_bad_row, int_option, list_files
from datum_sql.errors import SourceError

DEFAULT_BATCH_SIZE = 65_536
_END = object()


class FileSource(Source):
    """Rows of the files ``path`` names, in file-name order, as batches of at most
    ``batch_size`` rows.

    Every batch has :attr:`schema`: the declared columns (matched by name, then cast) or,
    without a declaration, the schema of the first file. Position is
    ``{"file": i, "row": n}``: file ``i`` of the sorted list, ``n`` rows of it yielded.
    """

    EXTENSIONS: ClassVar[tuple[str, ...]] = ()
    OPTIONS: ClassVar[dict[str, str]] = {
        "path": "a file, a directory (its files of this format, by name) or a glob",
        "batch_size": f"most rows per batch (default {DEFAULT_BATCH_SIZE})",
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("path",)

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self.path = str(spec.options["path"])
        self.batch_size = int_option(spec.name, spec.options, "batch_size", DEFAULT_BATCH_SIZE)
        self._files = list_files(self.name, self.path, self.EXTENSIONS)
        self._file_index = 0
        self._row = 0
        if spec.schema is not None:
            self._schema = spec.schema
        elif self._files:
            self._schema = self._guard(self._files[0], 0, self.infer_schema, self._files[0])
        else:
            raise SourceError(
                f"source {self.name!r}: no files at {self.path!r} to infer the columns from; "
                "declare the columns or add a file"
            )

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    # -- format hooks -------------------------------------------------------------------

    @abstractmethod
    def infer_schema(self, path: str) -> pa.Schema:
        """The schema of one file (metadata or its first block)."""

    @abstractmethod
    def open_file(self, path: str, skip: int) -> tuple[Iterator[pa.RecordBatch], int]:
        """Raw batches of ``path`` with the columns of :attr:`schema` (by name), and how many
        leading rows the format already skipped (<= ``skip``; the rest is sliced off here)."""

    def describe_error(self, path: str, row: int, exc: Exception) -> str:
        """Why reading failed; ``row`` is the first row (0-based) of the block that failed."""
        return f"{exc} (at or after row {row + 1})"

    # -- Source -------------------------------------------------------------------------

    async def open(self, position: dict[str, Any] | None) -> None:
        # The directory is listed again: files may have appeared since the source was made.
        self._files = await asyncio.to_thread(list_files, self.name, self.path, self.EXTENSIONS)
        position = position or {}
        self._file_index = int(position.get("file", 0))
        self._row = int(position.get("row", 0))
        expected = position.get("path")
        if expected is not None and (
            self._file_index >= len(self._files) or self._files[self._file_index] != expected
        ):
            raise SourceError(
                f"source {self.name!r}: cannot resume at file {expected!r}: the files at "
                f"{self.path!r} changed since the checkpoint (files are read in name order, "
                "add new files with names that sort last)"
            )

    def position(self) -> dict[str, Any]:
        pos: dict[str, Any] = {"file": self._file_index, "row": self._row}
        if self._file_index < len(self._files):
            pos["path"] = self._files[self._file_index]
        return pos

    async def read(self) -> AsyncIterator[SourceItem]:
        while self._file_index < len(self._files):
            batches = self._file_batches(self._files[self._file_index], self._row)
            while (batch := await asyncio.to_thread(next, batches, _END)) is not _END:
                assert isinstance(batch, pa.RecordBatch)
                self._row += batch.num_rows
                yield batch
            self._file_index += 1
            self._row = 0

    def metrics(self) -> dict[str, Any]:
        return {"files": len(self._files), "file": self._file_index, "row": self._row}

    # -- internals ----------------------------------------------------------------------

    def _guard(self, path: str, row: int, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SourceError(
                f"source {self.name!r}: cannot read {path}: {self.describe_error(path, row, exc)}"
            ) from exc

    def _file_batches(self, path: str, skip: int) -> Iterator[pa.RecordBatch]:
        """The conformed batches of one file from row ``skip`` on (runs in a worker thread)."""
        raw, row = self._guard(path, 0, self.open_file, path, skip)
        while (batch := self._guard(path, row, next, raw, None)) is not None:
            start = max(skip - row, 0)
            row += batch.num_rows
            if start >= batch.num_rows:
                continue
            batch = self._conform(batch.slice(start), path, row - batch.num_rows + start)
            for offset in range(0, batch.num_rows, self.batch_size):
                yield batch.slice(offset, self.batch_size)

    def _conform(self, batch: pa.RecordBatch, path: str, first_row: int) -> pa.RecordBatch:
        """Select the schema's columns by name and cast them, naming the row that fails."""
        if batch.schema.equals(self._schema):
            return batch
        columns = []
        for field in self._schema:
            idx = batch.schema.get_field_index(field.name)
            if idx < 0:
                raise SourceError(
                    f"source {self.name!r}: {path} has no column {field.name!r} "
                    f"(it has {', '.join(batch.schema.names)})"
                )
            column = batch.column(idx)
            if column.type != field.type:
                try:
                    column = column.cast(field.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                    bad = first_bad_row(column, field.type) or 0
                    raise SourceError(
                        f"source {self.name!r}: {path}, column {field.name!r}, row "
                        f"{first_row + bad + 1}: cannot read {column[bad].as_py()!r} "
                        f"as {field.type} ({exc})"
                    ) from exc
            columns.append(column)
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)
