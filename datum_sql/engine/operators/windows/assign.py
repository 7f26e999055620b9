"""Window assignment: int64 event-time microseconds in, window starts out. Pure numpy.

Windows are aligned to the Unix epoch and half-open ``[start, start + size)``; a window
offset shifts times before assignment and window bounds back after it (the operators do
that), so these functions see epoch-aligned times only.

- tumble: ``start = floor(t / size) * size``.
- hop: every ``start`` that is a multiple of ``slide`` with ``start <= t < start + size``
  (``size / slide`` windows per row when slide divides size, none in the gaps when
  ``slide > size``). Rows are first cut into *panes* of ``gcd(size, slide)``: all rows of a
  pane belong to the same windows, so a batch is aggregated per pane and each pane's
  partial is fanned out to its windows (:func:`hop_expand`).
- cumulate: windows ``[s, s + step)``, ``[s, s + 2 * step)``, ... ``[s, s + size)`` share
  the start ``s = floor(t / size) * size``; a row is in those ending after it. Panes are
  ``step`` long; :func:`cumulate_expand` fans a pane out to the windows holding it,
  numbered by ``end / step``.
- session: per key, rows less than ``gap`` apart share a session
  ``[first t, last t + gap)``; :func:`session_runs` cuts sorted rows into runs and
  :func:`merge_intervals` merges overlapping ``[start, end)`` intervals per key, which is
  how arriving runs join, extend and bridge existing sessions.
"""

from __future__ import annotations

import math

import numpy as np


def tumble_start(t: np.ndarray, size: int) -> np.ndarray:
    """The start of the tumbling window of each time (floor division: right for t < 0)."""
    return np.floor_divide(t, size) * size


#: rows in time order spanning at most this many panes are numbered from the pane edges
_EDGES = 64


def pane_numbers(t: np.ndarray, offset: int, pane: int) -> np.ndarray:
    """``floor((t - offset) / pane)`` per time. An int64 division is the slowest pass of
    a window batch; times in order (most batches, a few panes each) are numbered from
    the edges of their panes instead: a binary search per edge and one fill."""
    n = len(t)
    if n == 0:
        return np.empty(0, np.int64)
    first = (int(t.min()) - offset) // pane
    last = (int(t.max()) - offset) // pane
    if first == last:
        return np.full(n, first, np.int64)
    if last - first <= _EDGES and bool((t[1:] >= t[:-1]).all()):
        edges = np.array([k * pane + offset for k in range(first + 1, last + 1)], np.int64)
        cuts = np.searchsorted(t, edges, "left")  # rows before each next pane's start
        counts = np.diff(np.concatenate([[0], cuts, [n]]))
        return np.repeat(np.arange(first, last + 1, dtype=np.int64), counts)
    return np.floor_divide(t - offset, pane)


def hop_pane(size: int, slide: int) -> int:
    """The pane length of a hop: every row of a pane shares its windows."""
    return math.gcd(size, slide)


def hop_expand(pane_start: np.ndarray, size: int, slide: int) -> tuple[np.ndarray, np.ndarray]:
    """Fan panes out to windows: (index of the pane, window start) per (pane, window).

    ``pane_start`` are multiples of :func:`hop_pane`. Windows come out per pane in
    increasing start order.
    """
    g = hop_pane(size, slide)
    first = -np.floor_divide(-(pane_start - size + g), slide) * slide  # ceil to slide
    last = np.floor_divide(pane_start, slide) * slide
    count = np.maximum((last - first) // slide + 1, 0)
    idx = np.repeat(np.arange(len(pane_start), dtype=np.int64), count)
    offsets = np.arange(len(idx), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return idx, first[idx] + offsets * slide


def hop_starts(t: np.ndarray, size: int, slide: int) -> tuple[np.ndarray, np.ndarray]:
    """(row index, window start) for every window of every row (the oracle form)."""
    return hop_expand(t - np.mod(t, hop_pane(size, slide)), size, slide)


def cumulate_expand(pane: np.ndarray, step: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Fan cumulate panes (numbers: ``pane start / step``) out to their windows: (index of
    the pane, window number = ``window end / step``) per (pane, window), in increasing end
    order per pane. ``size`` is a multiple of ``step``."""
    per = size // step
    last = (np.floor_divide(pane, per) + 1) * per  # the end of the full window, in steps
    count = last - pane
    idx = np.repeat(np.arange(len(pane), dtype=np.int64), count)
    offsets = np.arange(len(idx), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return idx, pane[idx] + 1 + offsets


def cumulate_start(end_number: np.ndarray, step: int, size: int) -> np.ndarray:
    """The start of the cumulate window numbered ``end / step``."""
    return np.floor_divide((end_number - 1) * step, size) * size


def cumulate_windows(t: np.ndarray, step: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(row index, window end) for every cumulate window of every row (the oracle form)."""
    idx, number = cumulate_expand(np.floor_divide(t, step), step, size)
    return idx, number * step


def session_runs(kid: np.ndarray, t: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut rows into runs: same key, consecutive (by time) rows less than ``gap`` apart.

    Returns (run id of each row, in the input order; sort order used) — runs are numbered
    in (key, time) order. Equal times keep arrival order.
    """
    order = np.lexsort((t, kid))
    ks, ts = kid[order], t[order]
    brk = np.ones(len(order), np.bool_)
    if len(order) > 1:
        brk[1:] = (ks[1:] != ks[:-1]) | (ts[1:] - ts[:-1] >= gap)
    run_sorted = np.cumsum(brk) - 1
    run = np.empty(len(order), np.int64)
    run[order] = run_sorted
    return run, order


def merge_intervals(kid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Group id per interval: intervals of one key that overlap (transitively) share one.

    Half-open: ``[a, b)`` and ``[b, c)`` do not overlap. Ids are dense, numbered in
    (key, start) order. Vectorized: a segmented running maximum of the ends, computed on
    ranks so that the per-key offset trick cannot overflow.
    """
    n = len(kid)
    gid = np.empty(n, np.int64)
    if n == 0:
        return gid
    order = np.lexsort((start, kid))
    k, s, e = kid[order], start[order], end[order]
    ranks = np.unique(np.concatenate([s, e]))
    rs = np.searchsorted(ranks, s)
    re = np.searchsorted(ranks, e)
    seg_start = np.ones(n, np.bool_)
    seg_start[1:] = k[1:] != k[:-1]
    seg = np.cumsum(seg_start) - 1
    width = len(ranks) + 1
    reach = np.maximum.accumulate(seg * width + re) - seg * width  # max end so far in key
    new = seg_start.copy()
    new[1:] |= rs[1:] >= reach[:-1]
    gid[order] = np.cumsum(new) - 1
    return gid
