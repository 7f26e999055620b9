"""SQL column types to Arrow types and back.

TIMESTAMP is microseconds (as in PostgreSQL and DuckDB); TIMESTAMPTZ is microseconds in UTC.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import SqlError

_T = exp.DataType.Type

_TO_ARROW: dict[Any, pa.DataType] = {
    _T.BOOLEAN: pa.bool_(),
    _T.TINYINT: pa.int8(),
    _T.SMALLINT: pa.int16(),
    _T.INT: pa.int32(),
    _T.BIGINT: pa.int64(),
    _T.UTINYINT: pa.uint8(),
    _T.USMALLINT: pa.uint16(),
    _T.UINT: pa.uint32(),
    _T.UBIGINT: pa.uint64(),
    _T.FLOAT: pa.float32(),
    _T.DOUBLE: pa.float64(),
    _T.VARCHAR: pa.string(),
    _T.CHAR: pa.string(),
    _T.TEXT: pa.string(),
    _T.NVARCHAR: pa.string(),
    _T.NCHAR: pa.string(),
    _T.BINARY: pa.binary(),
    _T.VARBINARY: pa.binary(),
    _T.DATE: pa.date32(),
    _T.TIME: pa.time64("us"),
    _T.TIMESTAMP: pa.timestamp("us"),
    _T.DATETIME: pa.timestamp("us"),
    _T.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    _T.TIMESTAMPLTZ: pa.timestamp("us", tz="UTC"),
    _T.INTERVAL: pa.month_day_nano_interval(),
    _T.JSON: pa.string(),
    _T.JSONB: pa.string(),
    _T.UUID: pa.string(),
}


def arrow_type(dtype: exp.DataType, *, column: str = "") -> pa.DataType:
    """The Arrow type of a SQL column type; SqlError for a type we cannot store."""
    t = dtype.this
    if t in (_T.DECIMAL, _T.BIGDECIMAL):
        params = [int(p.this.this) for p in dtype.expressions if isinstance(p.this, exp.Literal)]
        precision, scale = (params + [38, 0][len(params) :])[:2] if params else (38, 9)
        return pa.decimal128(precision, scale)
    if t == _T.ARRAY and dtype.expressions:
        return pa.list_(arrow_type(dtype.expressions[0], column=column))
    if t in _TO_ARROW:
        return _TO_ARROW[t]
    where = f" of column {column!r}" if column else ""
    raise SqlError(f"unsupported column type {dtype.sql('postgres')}{where}")


def sql_type(atype: pa.DataType) -> str:
    """A SQL spelling of an Arrow type (for SHOW, DuckDB DDL and error messages)."""
    if pa.types.is_boolean(atype):
        return "BOOLEAN"
    for bits, name in ((8, "TINYINT"), (16, "SMALLINT"), (32, "INTEGER"), (64, "BIGINT")):
        if pa.types.is_integer(atype) and atype.bit_width == bits:
            return ("U" + name) if pa.types.is_unsigned_integer(atype) else name
    if pa.types.is_float32(atype):
        return "REAL"
    if pa.types.is_floating(atype):
        return "DOUBLE"
    if pa.types.is_decimal(atype):
        return f"DECIMAL({atype.precision}, {atype.scale})"
    if (
        pa.types.is_string(atype)
        or pa.types.is_large_string(atype)
        or pa.types.is_string_view(atype)
    ):
        return "VARCHAR"
    if (
        pa.types.is_binary(atype)
        or pa.types.is_large_binary(atype)
        or pa.types.is_binary_view(atype)
    ):
        return "BYTEA"
    if pa.types.is_timestamp(atype):
        return "TIMESTAMPTZ" if atype.tz else "TIMESTAMP"
    if pa.types.is_date(atype):
        return "DATE"
    if pa.types.is_time(atype):
        return "TIME"
    if pa.types.is_interval(atype) or pa.types.is_duration(atype):
        return "INTERVAL"
    if pa.types.is_list(atype) or pa.types.is_large_list(atype):
        return sql_type(atype.value_type) + "[]"
    return str(atype).upper()
