"""Parquet files: source (``connector = 'parquet'``) and exactly-once sink."""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files.common import fsync_path
from datum_sql.connectors.files.sink import FileSink
from datum_sql.connectors.files.source import Block, Changed, FileReader, FileSource, Origin
from datum_sql.connectors.registry import sink, source
from datum_sql.connectors.text import has_text
from datum_sql.errors import PlanError

_COMPRESSIONS = frozenset({"snappy", "zstd", "gzip", "lz4", "brotli", "none"})


@source("parquet")
class ParquetSource(FileSource):
    """Parquet files read with ``iter_batches``; a resume skips whole row groups by metadata.

    Rows are named by row group and row (1-based in the file); a dead-letter record's raw
    value is the row as JSON. The fingerprint of a file is its size, modification time and
    the CRC-32 of its footer (which holds every row group's offsets, sizes and statistics).
    """

    EXTENSIONS = (".parquet", ".pq", ".parq")

    def infer_schema(self, path: str) -> pa.Schema:
        return pq.read_schema(path)

    def open_reader(self, path: str, at: dict[str, Any] | None) -> _ParquetReader:
        return _ParquetReader(path, self.table_schema, self.wanted, self.batch_size, at)

    def changes(self, path: str, read: dict[str, Any]) -> Changed | None:
        st = os.stat(path)
        if st.st_size == read["size"] and st.st_mtime_ns == read["mtime_ns"]:
            return None
        if st.st_size == read["size"]:
            with pa.OSFile(path, "r") as f:
                if _footer_crc(f, path) == read["crc"]:
                    return None
        return Changed(
            f"it was rewritten (size {read['size']} -> {st.st_size} bytes, or a new footer)"
        )


class _ParquetReader(FileReader):
    """Blocks of at most ``batch_size`` rows; ``at`` is ``{"row": first row of the block}``.

    Reads the columns of ``schema`` named in ``wanted`` and those that can reject a row
    (see :func:`_can_reject`); a rejected row is still shown whole.
    """

    def __init__(
        self,
        path: str,
        schema: pa.Schema,
        wanted: list[str],
        batch_size: int,
        at: dict[str, Any] | None,
    ) -> None:
        self.path = path
        # One open file (native, not a Python file object) for the stat, the footer's
        # checksum and the reader.
        self._handle = pa.OSFile(path, "r")
        try:
            st = os.fstat(self._handle.fileno())
            crc = _footer_crc(self._handle, path)
            self._file = pq.ParquetFile(self._handle)
        except BaseException:
            self._handle.close()
            raise
        meta = self._file.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self._ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
        self._total = int(self._ends[-1]) if len(sizes) else 0
        self._stat = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "crc": crc}
        start = int(at["row"]) if at else 0
        first = int(np.searchsorted(self._ends, start, side="right"))
        self._row = int(self._ends[first - 1]) if first else 0
        # Columns the file lacks are reported by the shared checks, naming them.
        stored = self._file.schema_arrow
        self._schema = schema
        self._columns = [
            f.name
            for f in schema
            if f.name in wanted
            or stored.get_field_index(f.name) < 0
            or _can_reject(f, stored.field(f.name).type)
        ]
        columns = [n for n in self._columns if stored.get_field_index(n) >= 0]
        # pyarrow's threads decode columns in parallel, which pays off for a file of many
        # batches; for one batch's worth, handing the work to them and back costs more than
        # it saves (measured: 1,000 small files read in about half the time without them).
        self._batches = self._file.iter_batches(
            batch_size=batch_size,
            row_groups=list(range(first, len(sizes))),
            columns=columns,
            use_threads=self._total - self._row > batch_size,
        )
        self._skip = start - self._row  # rows of the first row group before ``at``

    def __next__(self) -> Block:
        while True:
            batch = next(self._batches)
            first, self._row = self._row, self._row + batch.num_rows
            if self._skip >= batch.num_rows:
                self._skip -= batch.num_rows
                continue
            batch, first = batch.slice(self._skip), first + self._skip
            self._skip = 0
            table = pa.Table.from_batches([batch])
            return Block({"row": first}, self._stat, batch.num_rows, table, columns=self._columns)

    def origins(self, block: Block, rows: list[int]) -> list[Origin]:
        values = _json_rows(self._whole_rows(block, rows))
        out = []
        for r, raw in zip(rows, values):
            row = block.at["row"] + r
            group = int(np.searchsorted(self._ends, row, side="right"))
            where = f"{self.path}, row group {group}, row {row + 1}"
            out.append(Origin(raw, where, f"{self.path}:{row + 1}"))
        return out

    def _whole_rows(self, block: Block, rows: list[int]) -> pa.Table:
        """Rows ``rows`` of ``block`` with every column of the table the file has (the
        block may lack some: read again from their row groups)."""
        taken = block.table.take(pa.array(rows, pa.int64()))
        stored = self._file.schema_arrow.names
        if all(n in block.table.column_names for n in self._schema.names if n in stored):
            return taken
        names = [n for n in self._schema.names if n in stored]
        absolute = np.asarray(rows, np.int64) + int(block.at["row"])
        groups = np.searchsorted(self._ends, absolute, side="right")
        pieces = []
        for group, row in zip(groups.tolist(), absolute.tolist()):
            start = int(self._ends[group - 1]) if group else 0
            pieces.append(self._file.read_row_group(group, columns=names).slice(row - start, 1))
        return pa.concat_tables(pieces)

    @property
    def ended(self) -> bool:
        return self._row >= self._total

    def fingerprint(self) -> dict[str, Any]:
        return dict(self._stat)

    def close(self) -> None:
        self._file.close()
        self._handle.close()


def _can_reject(field: pa.Field, stored: pa.DataType) -> bool:
    """Whether a column can make a row bad, so it is read even when the query does not
    read it: NOT NULL, text (checked for UTF-8), or stored as another type than declared
    (a cast that may fail)."""
    return not field.nullable or has_text(field.type) or stored != field.type


def _json_rows(table: pa.Table) -> list[bytes]:
    """Each row of ``table`` as a JSON object (text that is not UTF-8 is shown with
    replacement characters)."""
    columns: dict[str, list[Any]] = {}
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_string(column.type):
            column = column.cast(pa.binary())  # no UTF-8 check: the bytes as they are
        elif pa.types.is_large_string(column.type):
            column = column.cast(pa.large_binary())
        try:
            columns[name] = column.to_pylist()
        except UnicodeDecodeError:  # text nested in lists or structs
            columns[name] = ["(not valid UTF-8)"] * table.num_rows
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    return [json.dumps(row, default=_plain, ensure_ascii=False).encode() for row in rows]


def _plain(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _footer_crc(f: pa.NativeFile, path: str) -> int:
    """CRC-32 of the footer of the Parquet file ``f`` (its metadata, length and magic)."""
    size = f.size()
    if size < 8:
        raise ValueError(f"{path} is not a Parquet file (only {size} bytes)")
    f.seek(size - 8)
    tail = f.read(8)
    length = int.from_bytes(tail[:4], "little")
    f.seek(max(size - 8 - length, 0))
    crc = zlib.crc32(f.read())
    f.seek(0)
    return crc


class _ParquetWriter:
    def __init__(self, path: str, schema: pa.Schema, compression: str) -> None:
        self.path = path
        self._writer = pq.ParquetWriter(path, schema, compression=compression)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        fsync_path(self.path)


@sink("parquet")
class ParquetSink(FileSink):
    """Part files of Parquet (one per ``max_file_rows`` rows or checkpoint)."""

    EXTENSION = "parquet"
    OPTIONS = {
        **FileSink.OPTIONS,
        "compression": "snappy (default), zstd, gzip, lz4, brotli or none",
    }

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self.compression = str(self.spec.options.get("compression", "snappy")).lower()
        if self.compression not in _COMPRESSIONS:
            raise PlanError(
                f"{self.name}: option 'compression' must be one of "
                f"{', '.join(sorted(_COMPRESSIONS))}, got {self.compression!r}"
            )

    def open_writer(self, path: str, schema: pa.Schema) -> _ParquetWriter:
        return _ParquetWriter(path, schema, self.compression)
