"""Ordering columns as numpy int64: the one conversion every stage shares.

Event time and every other ordered column (an ASOF or interval join's time, a watermark's
column) travel through the engine as int64 *ordinals* in the column's own unit, so one
comparison works for all of them and a watermark is an ordinal too:

- TIMESTAMP: microseconds since the epoch (every unit and zone is cast to ``us``);
- DATE: microseconds since the epoch of its midnight, so INTERVAL offsets and delays apply;
- integers: the value itself;
- DECIMAL(p, s): the unscaled integer at scale ``s`` (or at a larger requested scale), so
  ``1.25`` at scale 2 is ``125``; a value beyond int64 fails loudly.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa

from datum_sql.engine.arrays import one_array
from datum_sql.errors import SchemaError

#: Stands in for a missing event time in arithmetic (far below any real timestamp, and
#: far enough above int64's minimum that subtracting a delay cannot overflow).
NO_TIME = -(2**62)


def is_ordinal_type(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` can order a join or carry a watermark."""
    return (
        pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_integer(t)
        or pa.types.is_decimal(t)
    )


def ordinal_domain(t: pa.DataType) -> str:
    """Columns of one domain compare as ordinals: 'time', 'integer' or 'decimal'."""
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "time"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_decimal(t):
        return "decimal"
    raise SchemaError(f"a {t} column has no order the engine tracks")


def _decimal_units(arr: pa.Array, scale: int) -> pa.Array:
    """The unscaled int64 of a decimal array at ``scale`` (>= its own)."""
    t = arr.type
    up = scale - t.scale
    if up:  # exact: the cast only appends zero digits (a value too wide fails loudly)
        arr = arr.cast(pa.decimal128(min(38, t.precision + up), scale))
    if pa.types.is_decimal256(arr.type):
        arr = arr.cast(pa.decimal128(38, scale))
    raw = np.frombuffer(arr.buffers()[1], dtype=np.int64)[
        2 * arr.offset : 2 * (arr.offset + len(arr))
    ]
    lo, hi = raw[0::2], raw[1::2]
    fits = hi == (lo >> 63)
    valid = np.asarray(arr.is_valid()) if arr.null_count else None
    if not (fits if valid is None else fits | ~valid).all():
        raise SchemaError(f"a DECIMAL value beyond 64 bits cannot order a join ({t})")
    return pa.array(lo, pa.int64(), mask=None if valid is None else ~valid)


def ordinals(
    column: pa.Array | pa.ChunkedArray, scale: int | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 ordinals, valid mask or None when there are no NULLs) of an ordered column;
    NULLs read as :data:`NO_TIME`. ``scale`` puts a DECIMAL at that scale. Zero-copy for
    timestamp[us] and int64 without NULLs."""
    arr = one_array(column)
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        if not (pa.types.is_timestamp(t) and t.unit == "us"):
            arr = arr.cast(pa.timestamp("us", tz=getattr(t, "tz", None)))
        arr = arr.view(pa.int64())
    elif pa.types.is_decimal(t):
        arr = _decimal_units(arr, t.scale if scale is None else scale)
    elif pa.types.is_integer(t):
        if t != pa.int64():
            arr = arr.cast(pa.int64())  # safe: a uint64 above int64 fails loudly
    else:
        raise SchemaError(f"a {t} column has no order the engine tracks")
    if arr.null_count == 0:
        return arr.to_numpy(zero_copy_only=False), None
    valid = np.asarray(arr.is_valid())
    return np.asarray(arr.fill_null(NO_TIME)), valid


def watermark_unit(t: pa.DataType | None) -> str:
    """Which watermarks compare with each other: every timestamp and date in microseconds
    ('time'), an integer or decimal column only with columns of its exact type."""
    if t is None or pa.types.is_timestamp(t) or pa.types.is_date(t):
        return "time"
    return str(t)


def from_ordinals(values: np.ndarray, t: pa.DataType) -> pa.Array:
    """Values of type ``t`` from their int64 ordinals (the inverse of :func:`ordinals`)."""
    arr = pa.array(values, pa.int64())
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return arr.cast(pa.timestamp("us")).cast(t)
    if pa.types.is_decimal(t):
        scale = t.scale  # type: ignore[attr-defined]
        return pa.array([Decimal(int(v)).scaleb(-scale) for v in values], t)
    return arr.cast(t)


def event_micros(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`ordinals` of an event-time column (microseconds for a TIMESTAMP)."""
    return ordinals(column)


def event_micros_masked(
    column: pa.Array | pa.ChunkedArray, scale: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`ordinals`, with the valid mask always an array."""
    values, valid = ordinals(column, scale)
    return values, np.ones(len(values), np.bool_) if valid is None else valid
