"""The Python objects ``ctx.register_arrow`` accepts, made into what the arrow source reads.

DataFrames become a ``pyarrow.Table`` once, at registration, without copying where Arrow
allows (polars and pyarrow-backed pandas columns share their buffers), so they read like a
table: any number of times, in streaming and batch queries alike. Their column types are
made the ones datum-sql uses in flight (strings as ``string``, not ``large_string`` or
``string_view``; lists as ``list``; categoricals decoded), so a DataFrame gives the same result, to the type,
as the same data registered as a pyarrow Table. pyarrow objects and (async) iterators are
passed on as they are; an iterator may yield DataFrames too (see :func:`as_arrow_part`).

pandas, polars and DuckDB are never imported here: an object can only be one of theirs
when its library is already loaded (``sys.modules``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any

import pyarrow as pa

from datum_sql.errors import SchemaError, SourceError
from datum_sql.types import Watermark

ACCEPTED = (
    "a pyarrow Table, RecordBatch, RecordBatchReader or list of them; a pandas or polars "
    "DataFrame, a polars LazyFrame, a DuckDB relation or any object with "
    "__arrow_c_stream__; a dict of columns; or an (async) iterator of batches or DataFrames"
)


def as_arrow_data(data: Any, name: str, schema: pa.Schema | None = None) -> Any:
    """``data`` as the arrow source reads it: a Table, RecordBatch, RecordBatchReader, a list
    of Tables/RecordBatches, or an (async) iterable. With a declared ``schema`` the columns
    keep their types (the source casts each batch to ``schema``, once); without one they
    get datum-sql's (see :func:`as_table`). Raises :class:`SourceError` naming the type of
    an object it does not accept."""
    if isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return data
    if hasattr(data, "__arrow_c_stream__") and hasattr(data, "__next__"):
        # an iterator speaking Arrow (polars' ``collect_batches()``): a one-shot stream
        reader = _convert(lambda: pa.RecordBatchReader.from_stream(data), name)
        return reader if schema is not None else reader.cast(_plain_schema(reader.schema))
    table = as_table(data, name, schema)
    if table is not None:
        return table
    if isinstance(data, list | tuple):
        parts = []
        for i, part in enumerate(data):
            converted = part if isinstance(part, Watermark) else as_arrow_part(part, name, schema)
            if converted is None:
                raise SourceError(
                    f"register_arrow({name!r}): item {i} of the {type(data).__name__} is a "
                    f"{_type_name(part)}; a list holds pyarrow Tables or RecordBatches, "
                    "DataFrames and datum_sql.Watermark markers"
                )
            parts.append(converted)
        return parts
    if isinstance(data, str | bytes | bytearray | PathLike):
        raise SourceError(
            f"register_arrow({name!r}) got a {_type_name(data)}, not data; to read a file "
            "declare it in SQL: CREATE SOURCE ... WITH (connector = 'parquet', path = '...')"
        )
    if hasattr(data, "__aiter__") or (isinstance(data, Iterable) and not _is_array(data)):
        return data
    raise SourceError(
        f"register_arrow({name!r}) cannot read a {_type_name(data)}; it takes {ACCEPTED}"
    )


def as_arrow_part(
    part: Any, name: str, schema: pa.Schema | None = None
) -> pa.Table | pa.RecordBatch | None:
    """One item an iterator yielded, as Arrow (None when it is none of the table-like objects
    :func:`as_table` knows)."""
    if isinstance(part, pa.Table | pa.RecordBatch):
        return part
    return as_table(part, name, schema)


def as_table(data: Any, name: str, schema: pa.Schema | None = None) -> pa.Table | None:
    """A DataFrame, DuckDB relation, Arrow stream or dict of columns as a Table with
    datum-sql's column types, or with its own when ``schema`` declares the types the source
    casts it to; None for any other object."""
    table = _arrow_table(data, name)
    return _plain(table) if table is not None and schema is None else table


def _arrow_table(data: Any, name: str) -> pa.Table | None:
    pd = sys.modules.get("pandas")
    pl = sys.modules.get("polars")
    if (pd is not None and isinstance(data, pd.Series)) or (
        pl is not None and isinstance(data, pl.Series)
    ):
        raise SourceError(
            f"register_arrow({name!r}) got a {_type_name(data)}, one column without a table; "
            "make it a DataFrame first (series.to_frame())"
        )
    if pd is not None and isinstance(data, pd.DataFrame):
        # a named index is data (``set_index('id')``); the default RangeIndex is not
        named = any(n is not None for n in data.index.names)
        return _convert(lambda: pa.Table.from_pandas(data, preserve_index=named), name)
    if pl is not None and isinstance(data, pl.LazyFrame):
        data = _convert(data.collect, name)
    if pl is not None and isinstance(data, pl.DataFrame):
        return data.to_arrow()
    if isinstance(data, Mapping):
        return _convert(lambda: pa.table(dict(data)), name)
    if hasattr(data, "__arrow_c_stream__"):  # a DuckDB relation, or any Arrow stream
        return _convert(lambda: pa.table(data), name)
    return None


def _convert(make: Any, name: str) -> Any:
    try:
        return make()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(
            f"register_arrow({name!r}): the data cannot be made Arrow: {exc}"
        ) from exc


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with the column types datum-sql uses in flight, and without the pandas
    metadata. A column too large for 32-bit offsets keeps its large type."""
    columns = []
    for field, column in zip(table.schema, table.columns):
        target = _plain_type(field.type)
        if target != field.type:
            try:
                column = column.cast(target)
            except pa.ArrowInvalid:  # over 2 GiB of text in one chunk
                pass
        columns.append(column)
    schema = pa.schema(
        [pa.field(f.name, c.type, f.nullable) for f, c in zip(table.schema, columns)]
    )
    return pa.Table.from_arrays(columns, schema=schema)


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, _plain_type(f.type), f.nullable) for f in schema])


def _plain_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _plain_type(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return pa.list_(t.value_field.with_type(_plain_type(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in t])
    return t


def _is_array(data: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(data, np.ndarray)


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


__all__ = ["ACCEPTED", "as_arrow_data", "as_arrow_part", "as_table"]
