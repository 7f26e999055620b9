"""CSV files: source (``connector = 'csv'``) and exactly-once sink.

Nulls round-trip: the writer leaves a null field empty and quotes empty strings, and the
reader takes an unquoted empty field as null and ``""`` as the empty string.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from datum_sql.connectors.base import ConnectorSpec
from datum_sql.connectors.files.common import bool_option, first_bad_row, fsync_path
from datum_sql.connectors.files.sink import FileSink
from datum_sql.connectors.files.source import FileSource
from datum_sql.connectors.registry import sink, source
from datum_sql.errors import PlanError, SinkError

_BLOCK_SIZE = 4 << 20
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


@source("csv")
class CsvSource(FileSource):
    """CSV files, parsed in blocks by pyarrow's streaming reader.

    With ``header = false`` the declared columns name the fields by position (undeclared:
    ``f0``, ``f1``, ...). Quoted values may span lines.
    """

    EXTENSIONS = (".csv", ".csv.gz")
    OPTIONS = {**FileSource.OPTIONS, **_CSV_OPTIONS}

    def __init__(self, spec: ConnectorSpec) -> None:
        self.delimiter = _delimiter(spec)
        self.header = bool_option(spec.name, spec.options, "header", True)
        super().__init__(spec)

    def _options(
        self, types: dict[str, pa.DataType] | None, *, threads: bool = True, handler: Any = None
    ) -> dict[str, Any]:
        declared = self.spec.schema
        read = pacsv.ReadOptions(block_size=_BLOCK_SIZE, use_threads=threads)
        if not self.header:
            if declared is not None:
                read.column_names = declared.names
            else:
                read.autogenerate_column_names = True
        ncols = len(types) if types else 0
        parse = pacsv.ParseOptions(
            delimiter=self.delimiter,
            newlines_in_values=True,
            # One column: an empty line is a null value, not nothing.
            ignore_empty_lines=ncols != 1,
            invalid_row_handler=handler,
        )
        convert = pacsv.ConvertOptions(
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
            column_types=types or {},
            include_columns=list(types) if types else [],
        )
        return {"read_options": read, "parse_options": parse, "convert_options": convert}

    def infer_schema(self, path: str) -> pa.Schema:
        return pacsv.open_csv(path, **self._options(None)).schema

    def open_file(self, path: str, skip: int) -> tuple[Iterator[pa.RecordBatch], int]:
        types = {f.name: f.type for f in self.schema}
        return iter(pacsv.open_csv(path, **self._options(types))), 0

    def describe_error(self, path: str, row: int, exc: Exception) -> str:
        """Re-read the file slowly to name the row: the fast reader does not say."""
        text = str(exc)
        if "does not exist in CSV" in text:
            return f"{text}; the file's header lacks a declared column"
        try:
            found = self._locate(path)
        except Exception:  # the diagnosis is best effort; the original error stands
            found = None
        return f"{text} ({found})" if found else f"{text} (at or after row {row + 1})"

    def _locate(self, path: str) -> str | None:
        invalid: list[int] = []

        def on_invalid(bad: Any) -> str:
            if bad.number is not None:
                invalid.append(bad.number - (1 if self.header else 0))
            return "skip"

        strings = {f.name: pa.string() for f in self.schema}
        options = self._options(strings, threads=False, handler=on_invalid)
        row = 0
        for batch in pacsv.open_csv(path, **options):
            if invalid:
                return f"row {invalid[0]}: wrong number of fields"
            for field in self.schema:
                if field.type == pa.string():
                    continue
                column = batch.column(field.name)
                bad = first_bad_row(column, field.type)
                if bad is not None:
                    value = column[bad].as_py()
                    return f"column {field.name!r}, row {row + bad + 1}: {value!r}"
            row += batch.num_rows
        return f"row {invalid[0]}: wrong number of fields" if invalid else None


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
