"""Per-slot state columns: one value per group slot, updated in place and compacted.

Fixed-width types (integers, floats, booleans, dates, times, timestamps, durations) live
in growable numpy arrays with a validity mask, so merging a batch is a few fancy-indexed
numpy operations. Every other type (strings, decimals, binary, nested) lives in an Arrow
array rebuilt by one ``take`` per update.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.arrays import one_array


def numpy_dtype(t: pa.DataType) -> np.dtype | None:
    """The numpy dtype holding ``t``'s values bit for bit, or None (Arrow-backed)."""
    if pa.types.is_boolean(t):
        return np.dtype(np.bool_)
    if pa.types.is_integer(t):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_floating(t) and t.bit_width in (32, 64):
        return np.dtype(t.to_pandas_dtype())
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t):
        return np.dtype(np.int64)
    if pa.types.is_time64(t):
        return np.dtype(np.int64)
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return np.dtype(np.int32)
    return None


def _storage_type(t: pa.DataType) -> pa.DataType:
    """The integer type with ``t``'s layout (``t`` itself when it is not temporal)."""
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_date64(t):
        return pa.int64()
    if pa.types.is_time64(t):
        return pa.int64()
    if pa.types.is_date32(t) or pa.types.is_time32(t):
        return pa.int32()
    return t


def to_numpy(arr: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of a fixed-width array; null slots hold 0 / False."""
    arr = one_array(arr)
    storage = _storage_type(arr.type)
    if storage != arr.type:
        arr = arr.view(storage)
    if arr.null_count == 0:
        valid = np.ones(len(arr), np.bool_)
        values = arr.to_numpy(zero_copy_only=False)
    else:
        valid = np.asarray(arr.is_valid())
        zero = False if pa.types.is_boolean(storage) else 0
        values = arr.fill_null(pa.scalar(zero, storage)).to_numpy(zero_copy_only=False)
    return values, valid


def from_numpy(values: np.ndarray, valid: np.ndarray | None, t: pa.DataType) -> pa.Array:
    """The Arrow array of type ``t`` with ``values`` where ``valid`` (None = all valid)."""
    mask = None if valid is None or valid.all() else ~valid
    storage = _storage_type(t)
    arr = pa.array(values, type=storage, mask=mask)
    return arr.view(t) if storage != t else arr


class SlotColumn:
    """One state value per slot, of Arrow type ``type``; new slots start as ``fill``."""

    def __init__(self, type: pa.DataType, fill: Any = None) -> None:
        self.type = type
        self.fill = fill
        self.n = 0
        self.dtype = numpy_dtype(type)
        if self.dtype is not None:
            self.values = np.zeros(16, self.dtype)
            self.valid = np.zeros(16, np.bool_)
        else:
            self._arr: pa.Array = pa.array([], type)

    @property
    def is_numpy(self) -> bool:
        return self.dtype is not None

    def grow(self, n: int) -> None:
        """Extend to ``n`` slots; the new ones hold ``fill``."""
        if n <= self.n:
            return
        if self.dtype is not None:
            if n > len(self.values):
                cap = max(n, 2 * len(self.values))
                values = np.zeros(cap, self.dtype)
                valid = np.zeros(cap, np.bool_)
                values[: self.n] = self.values[: self.n]
                valid[: self.n] = self.valid[: self.n]
                self.values, self.valid = values, valid
            if self.fill is None:
                self.valid[self.n : n] = False
                self.values[self.n : n] = 0
            else:
                self.valid[self.n : n] = True
                self.values[self.n : n] = self.fill
        else:
            extra = pa.array([self.fill] * (n - self.n), self.type)
            self._arr = pa.concat_arrays([self._arr, extra])
        self.n = n

    def gather(self, slots: np.ndarray) -> pa.Array:
        if self.dtype is not None:
            return from_numpy(self.values[slots], self.valid[slots], self.type)
        return self._arr.take(pa.array(slots, pa.int64()))

    def set(self, slots: np.ndarray, arr: pa.Array) -> None:
        """Overwrite the (distinct) ``slots`` with ``arr``."""
        if len(slots) == 0:
            return
        if self.dtype is not None:
            v, ok = to_numpy(arr)
            self.values[slots] = v
            self.valid[slots] = ok
            return
        if arr.type != self.type:
            arr = arr.cast(self.type)
        index = np.arange(self.n, dtype=np.int64)
        index[slots] = self.n + np.arange(len(slots), dtype=np.int64)
        self._arr = pa.concat_arrays([self._arr, arr]).take(pa.array(index))

    def reset(self, slots: np.ndarray) -> None:
        """Put ``fill`` back in the (distinct) ``slots``."""
        if len(slots) == 0:
            return
        if self.dtype is not None:
            self.valid[slots] = self.fill is not None
            self.values[slots] = 0 if self.fill is None else self.fill
            return
        self.set(slots, pa.array([self.fill] * len(slots), self.type))

    def compact(self, keep: np.ndarray) -> None:
        """Keep only slots ``keep`` (increasing int indices), renumbered 0..len(keep)-1."""
        if self.dtype is not None:
            k = len(keep)
            self.values[:k] = self.values[keep]
            self.valid[:k] = self.valid[keep]
        else:
            self._arr = self._arr.take(pa.array(keep, pa.int64()))
        self.n = len(keep)

    def to_arrow(self) -> pa.Array:
        if self.dtype is not None:
            return from_numpy(self.values[: self.n], self.valid[: self.n], self.type)
        return self._arr

    def load(self, arr: pa.Array | pa.ChunkedArray) -> None:
        arr = one_array(arr)
        self.n = 0
        if self.dtype is not None:
            v, ok = to_numpy(arr)
            self.values = np.array(v, dtype=self.dtype, copy=True)
            self.valid = np.array(ok, dtype=np.bool_, copy=True)
            if len(self.values) == 0:
                self.values = np.zeros(16, self.dtype)
                self.valid = np.zeros(16, np.bool_)
        else:
            self._arr = arr.cast(self.type) if arr.type != self.type else arr
        self.n = len(arr)

    @property
    def nbytes(self) -> int:
        if self.dtype is not None:
            return self.n * (self.dtype.itemsize + 1)
        return int(self._arr.nbytes)
