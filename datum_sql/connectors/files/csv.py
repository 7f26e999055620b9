"""CSV files: source (``connector = 'csv'``) and exactly-once sink.

Nulls round-trip: the writer leaves a null field empty and quotes empty strings, and the
reader takes an unquoted empty field as null and ``""`` as the empty string.
"""

from __future__ import annotations

import codecs
import csv as stdlib_csv
import io
import re

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files.chunked import TextFileSource, TextReader, line_spans
from datum_sql.connectors.files.common import bool_option, fsync_path
from datum_sql.connectors.files.sink import FileSink
from datum_sql.connectors.files.source import FileSource
from datum_sql.connectors.registry import sink, source
from datum_sql.errors import PlanError, SinkError, SourceError

#: bytes read to infer the columns of an undeclared file
_BLOCK_SIZE = 4 << 20
_ROW_NUMBER = re.compile(r"Row #\d+: ")
_COLUMN_NUMBER = re.compile(r"In CSV column #(\d+): ")
_QUOTE = ord('"')
_CSV_OPTIONS = {
    "delimiter": "field separator, one character (default ',')",
    "header": "true (default): the first line names the columns; false: it is data",
}


def _delimiter(spec: ConnectorSpec) -> str:
    value = str(spec.options.get("delimiter", ","))
    if value == "\\t":
        value = "\t"
    if len(value) != 1:
        raise PlanError(f"{spec.name}: option 'delimiter' must be one character, got {value!r}")
    return value


def _record_pattern(delimiter: str) -> bytes:
    """A regular expression matching one CSV record as pyarrow reads it: a quote opens a
    quoted field only at the start of a field, ``""`` inside one is a quote, and what
    follows the closing quote up to the next separator belongs to the field."""
    d = re.escape(delimiter).encode()
    plain = rb"[^" + d + rb"\r\n]"
    quoted = rb'"(?:[^"]|"")*+"' + plain + rb"*+"
    unquoted = rb"(?:[^" + d + rb'\r\n"]' + plain + rb"*+)?"
    field = rb"(?:" + quoted + rb"|" + unquoted + rb")"
    return field + rb"(?:" + d + field + rb")*+(?:\r\n|\n|\r)"


def _blank_lines(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which records [starts, ends) of ``buf`` are only a line end."""
    last = len(buf) - 1
    first = buf[np.minimum(starts, last)]
    second = buf[np.minimum(starts + 1, last)]
    length = ends - starts
    newline = (first == ord("\n")) | (first == ord("\r"))
    crlf = (first == ord("\r")) & (second == ord("\n"))
    return ((length == 1) & newline) | ((length == 2) & crlf)


def header_names(line: bytes, delimiter: str) -> list[str]:
    """The names of a CSV header line, fields quoted as pyarrow reads them (a quote opens a
    field only at its start, ``""`` inside one is a quote, what follows the closing quote
    belongs to the field). Python's csv module, not a pyarrow reader: one per file costs a
    thread-pool round trip that waited 0.5 to 2.7 ms per file while the engine's threads
    ran (most of the time of 1,000 small files, benchmarks/file_ingest.py). A line without
    its line end fails, as it does in pyarrow: its last name may not be written yet."""
    if not line.endswith((b"\n", b"\r")):
        raise ValueError("its header line has no line end (the file may be being written)")
    rows = stdlib_csv.reader(
        io.StringIO(line.decode("utf-8"), newline=""),
        delimiter=delimiter,
        quotechar='"',
        doublequote=True,
        strict=False,
    )
    return next(rows, [])


@source("csv")
class CsvSource(TextFileSource):
    """CSV files, parsed in chunks by pyarrow's CSV reader.

    With ``header = false`` the declared columns name the fields by position (undeclared:
    ``f0``, ``f1``, ...). Quoted values may span lines. A chunk is cut after a record: where
    every quote opens or closes a field (the common case) by counting quotes, otherwise by a
    regular expression that reads quoting as pyarrow does.
    """

    EXTENSIONS = (".csv", ".csv.gz")
    OPTIONS = {**FileSource.OPTIONS, **_CSV_OPTIONS}
    UNIT = "CSV row"

    def __init__(self, spec: ConnectorSpec) -> None:
        self.delimiter = _delimiter(spec)
        self.header = bool_option(spec.name, spec.options, "header", True)
        row = _record_pattern(self.delimiter)
        self._row = re.compile(row)
        self._records = re.compile(rb"(?:" + row + rb")*+")
        #: bytes a quote that opens or closes a field may touch
        self._edge = np.zeros(256, dtype=bool)
        self._edge[list(self.delimiter.encode() + b'\n\r"')] = True
        super().__init__(spec)
        # One column: an empty line is a null value, not nothing.
        self._ignore_empty = len(self.table_schema) != 1
        self._read_schema = pa.schema([(f.name, f.type) for f in self.table_schema])

    @property
    def read_schema(self) -> pa.Schema:
        return self._read_schema

    def _parse_options(self) -> pacsv.ParseOptions:
        """For inferring the columns of an undeclared file."""
        return pacsv.ParseOptions(delimiter=self.delimiter, newlines_in_values=True)

    def infer_schema(self, path: str) -> pa.Schema:
        read = pacsv.ReadOptions(block_size=_BLOCK_SIZE, autogenerate_column_names=not self.header)
        convert = pacsv.ConvertOptions(strings_can_be_null=True, quoted_strings_can_be_null=False)
        reader = pacsv.open_csv(
            path, read_options=read, parse_options=self._parse_options(), convert_options=convert
        )
        return reader.schema

    def prelude(self, reader: TextReader) -> list[str] | None:
        """The column names: the file's header line, or the declared names by position."""
        if not self.header:
            return self.spec.schema.names if self.spec.schema is not None else None
        want = 1 << 16
        while True:
            data = reader.peek(want)
            skip = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
            m = self._row.match(data, skip)
            if len(data) < want or (m is not None and m.end() < len(data)):
                break  # the end of the file, or a line end that is not the buffer's last byte
            want *= 2
        end = m.end() if m is not None else len(data)
        line = reader.take(end)[skip:]
        if not line.strip(b"\r\n"):
            raise ValueError("empty CSV file: it has no header line")
        names = header_names(line, self.delimiter)
        missing = [n for n in self.table_schema.names if n not in names]
        if missing:
            raise SourceError(
                f"source {self.name!r}: {reader.path} has no column {missing[0]!r} "
                f"(its header names {', '.join(names)})"
            )
        return names

    def parse(self, data: bytes, context: list[str] | None) -> pa.Table:
        if not data:
            return self._read_schema.empty_table()
        convert = pacsv.ConvertOptions(
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            column_types=dict(zip(self._read_schema.names, self._read_schema.types)),
            include_columns=self._read_schema.names,
        )
        parse = pacsv.ParseOptions(
            delimiter=self.delimiter, newlines_in_values=True, ignore_empty_lines=self._ignore_empty
        )

        read = pacsv.ReadOptions(
            block_size=len(data) + 1,
            column_names=context or [],
            autogenerate_column_names=context is None,
        )
        return pacsv.read_csv(
            pa.BufferReader(data), read_options=read, parse_options=parse, convert_options=convert
        )

    def cut(self, data: bytes) -> int:
        end = data.rfind(b"\n") + 1
        if not end or data.find(b'"', 0, end) < 0:
            return end
        buf = np.frombuffer(data, dtype=np.uint8, count=end)
        quotes = np.flatnonzero(buf == _QUOTE)
        if self._quotes_open_and_close(buf, quotes):
            # a line end outside quotes has an even number of quotes before it
            while end and np.searchsorted(quotes, end - 1) % 2:
                end = data.rfind(b"\n", 0, end - 1) + 1
            return end
        m = self._records.match(data, 0, end)
        return m.end() if m is not None else 0

    def _quotes_open_and_close(self, buf: np.ndarray, quotes: np.ndarray) -> bool:
        """True when, counting quotes from the start, each one that opens a field comes after
        a separator, a line end or a quote (doubling it), and each one that closes a field
        comes before one of those: then quote parity is pyarrow's quoting."""
        opening, closing = quotes[0::2], quotes[1::2]
        if len(opening) and opening[0] == 0:
            opening = opening[1:]
        if len(closing) and closing[-1] == len(buf) - 1:
            closing = closing[:-1]
        edge = self._edge
        return bool(edge[buf[opening - 1]].all() and edge[buf[closing + 1]].all())

    def records(self, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        buf = np.frombuffer(data, dtype=np.uint8)
        quotes = np.flatnonzero(buf == _QUOTE)
        lone_cr = data.count(b"\r") != data.count(b"\r\n")
        if not lone_cr and (not len(quotes) or self._quotes_open_and_close(buf, quotes)):
            starts, ends = line_spans(data)
            if len(quotes) and len(ends):
                # a record ends at a line end with an even number of quotes before it
                outside = np.searchsorted(quotes, ends - 1) % 2 == 0
                outside[-1] = True
                ends = ends[outside]
                starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        else:
            found, pos = [], 0
            while pos < len(data):
                m = self._row.match(data, pos)
                pos = m.end() if m is not None else len(data)
                found.append(pos)
            ends = np.asarray(found, dtype=np.int64)
            starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        if self._ignore_empty and len(starts):
            blank = _blank_lines(buf, starts, ends)
            starts, ends = starts[~blank], ends[~blank]
        return starts, ends

    def reason(self, exc: Exception, context: list[str] | None) -> str:
        text = super().reason(exc, context)
        text = _ROW_NUMBER.sub("", text)
        m = _COLUMN_NUMBER.match(text)
        if m is not None:
            i = int(m.group(1))
            names = context or [f"f{j}" for j in range(i + 1)]
            name = names[i] if i < len(names) else f"#{i}"
            text = f"column {name!r}: {text[m.end() :]}"
        return text


_NESTED = re.compile(r"list|struct|map|union|dictionary")


class _CsvWriter:
    def __init__(self, path: str, schema: pa.Schema, options: pacsv.WriteOptions) -> None:
        self.path = path
        self._writer = pacsv.CSVWriter(path, schema, write_options=options)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        fsync_path(self.path)


@sink("csv")
class CsvSink(FileSink):
    """Part files of CSV, each with a header line unless ``header = false``."""

    EXTENSION = "csv"
    OPTIONS = {**FileSink.OPTIONS, **_CSV_OPTIONS}

    def __init__(self, spec: ConnectorSpec) -> None:
        super().__init__(spec)
        self._write_options = pacsv.WriteOptions(
            include_header=bool_option(self.name, self.spec.options, "header", True),
            delimiter=_delimiter(self.spec),
        )

    def check_schema(self, schema: pa.Schema) -> None:
        for field in schema:
            if _NESTED.match(str(field.type)):
                raise SinkError(
                    f"sink {self.name!r}: column {field.name!r} of type {field.type} cannot be "
                    "written to CSV; use connector 'parquet' or 'jsonl', or cast it to VARCHAR"
                )

    def open_writer(self, path: str, schema: pa.Schema) -> _CsvWriter:
        return _CsvWriter(path, schema, self._write_options)
