"""JSON Lines files (one object per line): source (``connector = 'jsonl'``) and sink.

Without declared columns the schema is inferred from the first block of the first file;
JSON has no timestamp type, so timestamps then arrive as strings: declare the columns to
read them as TIMESTAMP. Fields a row lacks are null; fields not in the schema are ignored.
"""

from __future__ import annotations

import re

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files.chunked import TextFileSource, ends_line, line_spans
from datum_sql.connectors.files.common import fsync_path
from datum_sql.connectors.files.sink import FileSink
from datum_sql.connectors.registry import sink, source

#: bytes read to infer the columns of an undeclared file
_BLOCK_SIZE = 4 << 20
#: how pyarrow's JSON errors name a column
_COLUMN = re.compile(r"Column\(/([^)]*)\)")
#: bytes that are not JSON whitespace (a line of whitespace only is no record)
_NOT_SPACE = np.ones(256, dtype=bool)
_NOT_SPACE[list(b" \t\r\n")] = False


def _read_type(t: pa.DataType) -> pa.DataType:
    """What pyarrow's JSON reader can produce for ``t``; the shared cast step does the rest."""
    if pa.types.is_date(t) or pa.types.is_time(t):
        return pa.string()
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_dictionary(t):
        return _read_type(t.value_type)
    return t


@source("jsonl")
class JsonlSource(TextFileSource):
    """JSON Lines files, parsed in chunks by pyarrow's JSON reader; strings are checked to
    be valid UTF-8 (the reader does not check)."""

    EXTENSIONS = (".jsonl", ".ndjson", ".json")
    UNIT = "JSON object"

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self._read_schema = pa.schema(
            [pa.field(f.name, _read_type(f.type)) for f in self.table_schema]
        )

    @property
    def read_schema(self) -> pa.Schema:
        return self._read_schema

    def infer_schema(self, path: str) -> pa.Schema:
        return pj.open_json(path, read_options=pj.ReadOptions(block_size=_BLOCK_SIZE)).schema

    def parse(self, data: bytes, context: None) -> pa.Table:
        if not data or data.isspace():
            return self._read_schema.empty_table()
        options = pj.ParseOptions(
            explicit_schema=self._read_schema, unexpected_field_behavior="ignore"
        )

        read = pj.ReadOptions(block_size=len(data) + 1)
        return pj.read_json(pa.BufferReader(data), read_options=read, parse_options=options)

    def cut(self, data: bytes) -> int:
        return data.rfind(b"\n") + 1

    def reason(self, exc: Exception, context: None) -> str:
        return _COLUMN.sub(r"column '\1'", super().reason(exc, context))

    def records(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        starts, ends = line_spans(data)
        keep = self._not_blank(data, starts)
        return starts[keep], ends[keep]

    def agrees(self, data: bytes, rows: int) -> bool:
        """One row per line that is not blank (the reader would take two objects on one line
        as two rows). Counting line ends is cheap; blank lines are looked for only when the
        count differs."""
        buf = np.frombuffer(data, dtype=np.uint8)
        lines = int(np.count_nonzero(buf == ord("\n"))) + (not ends_line(data))
        if lines == rows:
            return True
        return int(np.count_nonzero(self._not_blank(data, line_spans(data)[0]))) == rows

    @staticmethod
    def _not_blank(data: bytes, starts: np.ndarray) -> np.ndarray:
        if not len(starts):
            return np.zeros(0, dtype=bool)
        return np.logical_or.reduceat(_NOT_SPACE[np.frombuffer(data, dtype=np.uint8)], starts)


def _prepare(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Timestamps as ISO-8601 text (``T`` separator, offset when zoned); NaN/inf as null,
    since JSON has no such numbers."""
    columns = []
    for field, column in zip(batch.schema, batch.columns):
        t = field.type
        if pa.types.is_timestamp(t):
            # the cast writes "2024-01-01 00:00:00.5[Z|+0200]"; 13x faster than strftime
            text = column.cast(pa.string())
            column = pc.replace_substring(text, " ", "T", max_replacements=1)
        elif pa.types.is_floating(t):
            column = pc.if_else(pc.is_finite(column), column, pa.scalar(None, t))
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _utf8_bytes(lines: pa.Array) -> memoryview:
    """The bytes of a string array without nulls: one contiguous slice of its data buffer."""
    if lines.type not in (pa.string(), pa.large_string()):
        lines = lines.cast(pa.large_string())
    if len(lines) == 0:
        return memoryview(b"")
    _, offsets_buf, data = lines.buffers()
    offsets = memoryview(offsets_buf).cast("q" if lines.type == pa.large_string() else "i")
    return memoryview(data)[offsets[lines.offset] : offsets[lines.offset + len(lines)]]


class _JsonlWriter:
    """Encodes with DuckDB's ``to_json`` over the whole batch (C++, escaping and nested
    types handled), then writes the resulting strings' buffer in one call: no per-row
    Python. pyarrow has no JSON writer, and hand-built escaping with string kernels
    cannot produce ``\\uXXXX`` escapes for control characters."""

    def __init__(self, path: str, schema: pa.Schema, con: duckdb.DuckDBPyConnection) -> None:
        self.path = path
        self._con = con
        members = ", ".join(
            "'{}': \"{}\"".format(n.replace("'", "''"), n.replace('"', '""')) for n in schema.names
        )
        self._sql = f"SELECT to_json({{{members}}}) || chr(10) AS line FROM __datum_jsonl"
        self._file = open(path, "wb")  # noqa: SIM115 - closed in close()

    def write(self, batch: pa.RecordBatch) -> None:
        self._con.register("__datum_jsonl", _prepare(batch))
        try:
            lines = self._con.sql(self._sql).to_arrow_table().column("line")
        finally:
            self._con.unregister("__datum_jsonl")
        for chunk in lines.chunks:
            self._file.write(_utf8_bytes(chunk))

    def close(self) -> None:
        self._file.close()
        fsync_path(self.path)


@sink("jsonl")
class JsonlSink(FileSink):
    """Part files of JSON Lines; read back exactly by the ``jsonl`` source with the same
    declared columns (timestamps are ISO-8601 strings; NaN and infinities become null)."""

    EXTENSION = "jsonl"

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self._con: duckdb.DuckDBPyConnection | None = None

    def open_writer(self, path: str, schema: pa.Schema) -> _JsonlWriter:
        if self._con is None:
            self._con = duckdb.connect()
        return _JsonlWriter(path, schema, self._con)

    async def close(self) -> None:
        await super().close()
        if self._con is not None:
            self._con.close()
            self._con = None
