"""Frame arithmetic of over-window aggregates, vectorized over one release of final rows.

A release is a run of rows sorted by (partition slot, time, arrival): in each partition
first the rows kept from earlier releases that later frames still need, then the rows
made final now. A frame is an inclusive index range ``[lo, hi]`` into that run; every
aggregate over it is a difference of prefix sums (count, sum) or a sparse-table query
(min and max, over dense value codes so any orderable type works), with no per-row loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Partitions:
    """Where each row's partition starts and ends in a sorted run (inclusive indexes)."""

    start: np.ndarray
    end: np.ndarray
    #: Dense partition number of each row (0, 1, ... in run order).
    number: np.ndarray

    @staticmethod
    def of(slot: np.ndarray) -> Partitions:
        n = len(slot)
        idx = np.arange(n, dtype=np.int64)
        first = np.ones(n, np.bool_)
        first[1:] = slot[1:] != slot[:-1]
        last = np.ones(n, np.bool_)
        last[:-1] = first[1:]
        start = np.maximum.accumulate(np.where(first, idx, 0)) if n else idx
        end = np.minimum.accumulate(np.where(last, idx, n)[::-1])[::-1] if n else idx
        return Partitions(start, end, np.cumsum(first) - 1)


def count_before(
    slot: np.ndarray, ts: np.ndarray, q_slot: np.ndarray, q_ts: np.ndarray, *, inclusive: bool
) -> np.ndarray:
    """For each query ``(q_slot, q_ts)``, how many rows of the sorted run ``(slot, ts)``
    come before it: rows ``< (q_slot, q_ts)``, or ``<=`` when ``inclusive``. One sort of
    the run and the queries together, then a running count of the run's rows."""
    n, m = len(slot), len(q_slot)
    kind = np.concatenate(
        [np.full(n, 0 if inclusive else 1, np.int8), np.full(m, 1 if inclusive else 0, np.int8)]
    )
    order = np.lexsort((kind, np.concatenate([ts, q_ts]), np.concatenate([slot, q_slot])))
    is_row = order < n
    rows_before: np.ndarray = np.cumsum(is_row) - is_row
    out = np.empty(m, np.int64)
    out[order[~is_row] - n] = rows_before[~is_row]
    return out


def prefix(values: np.ndarray) -> np.ndarray:
    """``p`` with ``p[j] = values[:j].sum()``: a frame's sum is ``p[hi + 1] - p[lo]``."""
    out = np.zeros(len(values) + 1, np.float64 if values.dtype.kind == "f" else np.int64)
    np.cumsum(values, out=out[1:])
    return out


def range_extreme(codes: np.ndarray, lo: np.ndarray, hi: np.ndarray, *, low: bool) -> np.ndarray:
    """min (``low``) or max of ``codes[lo..hi]`` per query, ``lo <= hi``: a sparse table
    of power-of-two blocks up to the longest frame, two overlapping blocks per query."""
    op = np.minimum if low else np.maximum
    length = hi - lo + 1
    levels = [codes]
    longest = int(length.max()) if len(length) else 1
    width = 1
    while width * 2 <= longest:
        prev = levels[-1]
        levels.append(op(prev[:-width], prev[width:]))
        width *= 2
    k = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    out = np.empty(len(lo), codes.dtype)
    for level in np.unique(k):
        sel = k == level
        table = levels[level]
        out[sel] = op(table[lo[sel]], table[hi[sel] - (1 << level) + 1])
    return out


def running_extreme(codes: np.ndarray, parts: Partitions, *, low: bool) -> np.ndarray:
    """min (``low``) or max of ``codes`` from each row's partition start up to the row:
    one accumulate over the run, each partition shifted so no earlier one can win."""
    shift = parts.number.astype(np.int64) << 32
    if low:
        return np.minimum.accumulate(codes - shift) + shift
    return np.maximum.accumulate(codes + shift) - shift


@dataclass(frozen=True)
class Codes:
    """Dense order codes of a column (``1..D``, ``0`` for NULL) and a row holding each code."""

    codes: np.ndarray
    row_of: np.ndarray

    @staticmethod
    def of(values: pa.Array) -> Codes:
        if len(values) == 0:
            return Codes(np.empty(0, np.int64), np.zeros(1, np.int64))
        ranks = np.asarray(pc.rank(values, sort_keys="ascending", tiebreaker="dense")).astype(
            np.int64
        )
        if values.null_count:
            ranks = np.where(np.asarray(values.is_valid()), ranks, 0)
        row_of = np.zeros(int(ranks.max()) + 1, np.int64)
        row_of[ranks] = np.arange(len(ranks), dtype=np.int64)
        return Codes(ranks, row_of)

    def masked(self, *, low: bool) -> np.ndarray:
        """The codes with NULL above every value for a min (below every value for a max)."""
        return np.where(self.codes == 0, NULL_CODE, self.codes) if low else self.codes


#: Stands in for NULL in a min: above every code (codes are below 2**31), and small
#: enough for :func:`running_extreme`'s shifts.
NULL_CODE = 1 << 31
