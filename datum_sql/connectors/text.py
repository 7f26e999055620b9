"""Which values of an Arrow array are not valid UTF-8.

Decoders use it where bytes become VARCHAR: a parser that does not check (pyarrow's JSON
reader, a Parquet column written by another tool) would otherwise hand invalid strings
downstream, where a sink writes an empty line or a file that cannot be read back.

The check is Arrow's own full validation, one C++ pass over the whole array; only when it
fails are the bad values located, by halving (slices that validate are cleared whole), so
the cost is O(n) for clean data and O(bad * log n) validations otherwise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

_NONE = np.empty(0, dtype=np.int64)

#: Slices of at most this many values are checked one value at a time.
_SMALL = 8


def has_text(t: pa.DataType) -> bool:
    """True when values of ``t`` hold UTF-8 text somewhere (a string, or nested strings)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return True
    if pa.types.is_dictionary(t):
        return has_text(t.value_type)
    return any(has_text(t.field(i).type) for i in range(t.num_fields))


def invalid_utf8(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Sorted indices (int64) of the values of ``values`` that are not valid UTF-8.

    String arrays (and strings nested in lists, structs, maps, dictionaries) are checked
    where they are; a binary array is checked as if it were a string array (the question
    a decoder asks before casting bytes to VARCHAR). Other types have no text: no indices.
    """
    if isinstance(values, pa.ChunkedArray):
        parts, offset = [], 0
        for chunk in values.chunks:
            parts.append(invalid_utf8(chunk) + offset)
            offset += len(chunk)
        return np.concatenate(parts) if parts else _NONE
    t = values.type
    if pa.types.is_binary(t):
        values = values.view(pa.string())
    elif pa.types.is_large_binary(t):
        values = values.view(pa.large_string())
    elif pa.types.is_binary_view(t):
        values = values.view(pa.string_view())
    elif not has_text(t):
        return _NONE
    if pa.types.is_dictionary(values.type):
        # a value is bad when its dictionary entry is
        bad = invalid_utf8(values.dictionary)
        if not len(bad):
            return _NONE
        indices = values.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        return np.flatnonzero(np.isin(indices, bad)).astype(np.int64)
    if _valid(values):
        return _NONE
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        # a slice of a flat string array validates only its own values
        check: Callable[[int, int], bool] = lambda lo, hi: _valid(values.slice(lo, hi - lo))  # noqa: E731
    else:
        # a slice of a nested array validates its whole children: check a compacted copy
        check = lambda lo, hi: _valid(pa.concat_arrays([values.slice(lo, hi - lo)]))  # noqa: E731
    found: list[int] = []
    _halve(check, 0, len(values), found)
    return np.asarray(found, dtype=np.int64)


def _valid(values: pa.Array) -> bool:
    try:
        values.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _halve(check: Callable[[int, int], bool], lo: int, hi: int, found: list[int]) -> None:
    """Append to ``found`` the indices in [lo, hi) of values that fail ``check``; the range
    as a whole is known to fail."""
    if hi - lo <= _SMALL:
        found.extend(i for i in range(lo, hi) if not check(i, i + 1))
        return
    mid = (lo + hi) // 2
    for a, b in ((lo, mid), (mid, hi)):
        if not check(a, b):
            _halve(check, a, b, found)
