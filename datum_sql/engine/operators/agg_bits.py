"""``bit_and``, ``bit_or`` and ``bit_xor`` of integers as per-bit counts.

The state of a group is its count of non-NULL values and, for each of the 64 bits of the
values (as two's-complement int64), how many of them have it set: counts that add on merge
and subtract on retraction (a changelog), so all three retract exactly. The result's bit is

=========  ===============================
function   bit set when its count is
=========  ===============================
bit_and    the count of values (all set)
bit_or     above 0 (one set)
bit_xor    odd
=========  ===============================

NULLs are skipped; a group of no values is NULL. The result has the input's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.operators.aggregates import (
    Part,
    _Additive,
    _arr,
    group_sizes,
    register_function,
)
from datum_sql.engine.state.slots import SlotColumn, from_numpy, to_numpy
from datum_sql.errors import PlanError

_BITS = np.arange(64, dtype=np.uint64)


def _bit(words: np.ndarray, b: int) -> np.ndarray:
    """Bit ``b`` (0 or 1) of each word."""
    return (words >> _BITS[b]) & np.uint64(1)


def _words(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(the values' bits as uint64, valid) of an integer column."""
    v, ok = to_numpy(_arr(arr).cast(pa.int64(), safe=False))
    return v.astype(np.int64, copy=False).view(np.uint64), ok


class _Bits(_Additive):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.in_type is None or not pa.types.is_integer(self.in_type):
            raise PlanError(f"{self.func} of {self.in_type} is not supported: it takes integers")
        self.cols = [SlotColumn(pa.int64(), 0) for _ in range(65)]
        self.fast = True

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        assert self.input is not None
        words, ok = _words(batch.column(self.input))
        all_ok = bool(ok.all())
        g, words = (gid, words) if all_ok else (gid[ok], words[ok])
        n = group_sizes(g, n_groups, sizes if all_ok else None).astype(np.int64)
        counts = [np.bincount(g, weights=_bit(words, b), minlength=n_groups) for b in range(64)]
        return [pa.array(n), *(pa.array(np.rint(c).astype(np.int64)) for c in counts)]

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        assert self.input is not None
        words, ok = _words(batch.column(self.input))
        mask = ~ok
        out = {f"{self.alias}_n": pa.array(ok.astype(np.int64), mask=mask)}
        for b in range(64):
            out[f"{self.alias}_b{b}"] = pa.array(_bit(words, b).astype(np.int64), mask=mask)
        return out

    def batch_specs(self) -> list[tuple[Any, ...]]:
        opts = pc.ScalarAggregateOptions(min_count=0)
        return [(f"{self.alias}_n", "sum", opts)] + [
            (f"{self.alias}_b{b}", "sum", opts) for b in range(64)
        ]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        return [_arr(o).fill_null(0).cast(pa.int64()) for o in outs]

    def _set(self, n: np.ndarray, counts: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def final(self, slots: np.ndarray) -> pa.Array:
        n = self.cols[0].values[slots]
        counts = np.stack([c.values[slots] for c in self.cols[1:]], axis=1)  # slots x 64
        bits = self._set(n[:, None], counts).astype(np.uint64)
        words = np.bitwise_or.reduce(bits << _BITS, axis=1)
        return from_numpy(words.view(np.int64), n > 0, pa.int64()).cast(self.out_type, safe=False)


@register_function
class BitAnd(_Bits):
    func = "bit_and"

    def _set(self, n: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return counts == n


@register_function
class BitOr(_Bits):
    func = "bit_or"

    def _set(self, n: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return counts > 0


@register_function
class BitXor(_Bits):
    func = "bit_xor"

    def _set(self, n: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return counts % 2 == 1
