"""Event-time columns as numpy int64 microseconds: the one conversion every stage shares."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: Stands in for a missing event time in arithmetic (far below any real timestamp, and
#: far enough above int64's minimum that subtracting a delay cannot overflow).
NO_TIME = -(2**62)


def event_micros(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 microseconds, valid mask or None when there are no NULLs) of a timestamp
    column; NULLs read as :data:`NO_TIME`. Zero-copy for timestamp[us] without NULLs."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_timestamp(arr.type) or arr.type.unit != "us":
        arr = arr.cast(pa.timestamp("us", tz=getattr(arr.type, "tz", None)))
    if arr.null_count == 0:
        return arr.view(pa.int64()).to_numpy(zero_copy_only=False), None
    valid = np.asarray(arr.is_valid())
    return np.asarray(arr.view(pa.int64()).fill_null(NO_TIME)), valid


def event_micros_masked(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`event_micros`, with the valid mask always an array."""
    values, valid = event_micros(column)
    return values, np.ones(len(values), np.bool_) if valid is None else valid
