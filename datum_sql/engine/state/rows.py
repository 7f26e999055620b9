"""Rows held by id, and per-slot lists of row ids: the state of a top-N.

:class:`RowStore` keeps rows (Arrow) under ids 0, 1, ... in order of arrival, as a few
single-chunk tables in tiers of size: eight tables of one tier are merged into one of
the next (tier t holds tables below ``MERGE_ROWS * 8**(t + 1)`` rows), so a row is copied
about once per tier while the store grows, and a ``take`` reads a few contiguous tables
(a take from a table of many chunks concatenates them all first).
:meth:`RowStore.keep` drops the rows no longer held, renumbering the rest.

:class:`SlotLists` keeps, per slot (a partition), an ordered list of row ids as a segment
of one numpy array (start, count, capacity). Reading the lists of some slots is one
ragged gather; rewriting them writes their segments in place, or at the end of the array
for a list that outgrew its capacity (doubled). The space left behind is reclaimed once it
exceeds the space in use.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_EMPTY = np.empty(0, np.int64)


class RowStore:
    """Rows of ``schema`` by id."""

    TIER = 8
    MERGE_ROWS = 1 << 16

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._parts: list[pa.Table] = []
        self._starts = _EMPTY
        self.n = 0

    def append(self, table: pa.Table) -> int:
        """Store ``table``'s rows; the id of the first (the others follow)."""
        first = self.n
        if table.num_rows == 0:
            return first
        table = table.select(self.schema.names).combine_chunks()
        self._parts.append(table)
        self.n += table.num_rows
        t = self.TIER
        while len(self._parts) >= t and len({self._tier(p) for p in self._parts[-t:]}) == 1:
            self._parts[-t:] = [pa.concat_tables(self._parts[-t:]).combine_chunks()]
        if len(self._parts) > 4 * t:  # tables of mixed sizes that no tier merges
            self._parts = [pa.concat_tables(self._parts).combine_chunks()]
        self._starts = np.cumsum([0] + [p.num_rows for p in self._parts[:-1]], dtype=np.int64)
        return first

    def _tier(self, part: pa.Table) -> int:
        tier, bound = 0, self.MERGE_ROWS * self.TIER
        while part.num_rows >= bound:
            tier, bound = tier + 1, bound * self.TIER
        return tier

    def take(self, ids: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        """The rows ``ids`` (of ``columns``, default all), in that order, one chunk."""
        parts = self._parts if columns is None else [p.select(columns) for p in self._parts]
        schema = (
            self.schema if columns is None else pa.schema([self.schema.field(c) for c in columns])
        )
        if len(ids) == 0 or not parts:
            return schema.empty_table()
        if len(parts) == 1:
            return parts[0].take(pa.array(ids, pa.int64()))
        part = np.searchsorted(self._starts, ids, side="right") - 1
        if (part == part[0]).all():
            local = ids - self._starts[part[0]]
            return parts[part[0]].take(pa.array(local, pa.int64()))
        order = np.argsort(part, kind="stable")
        by_part = part[order]
        bounds = np.flatnonzero(np.diff(by_part)) + 1
        pieces = []
        for lo, hi in zip([0, *bounds], [*bounds, len(order)], strict=True):
            p = int(by_part[lo])
            local = ids[order[lo:hi]] - self._starts[p]
            pieces.append(parts[p].take(pa.array(local, pa.int64())))
        back = np.empty(len(ids), np.int64)
        back[order] = np.arange(len(ids), dtype=np.int64)
        return pa.concat_tables(pieces).take(pa.array(back))

    def keep(self, ids: np.ndarray) -> None:
        """Keep only the rows ``ids`` (increasing), renumbered 0..len(ids)-1."""
        kept = self.take(ids).combine_chunks()
        self._parts = [kept] if kept.num_rows else []
        self._starts = np.zeros(len(self._parts), np.int64)
        self.n = kept.num_rows

    @property
    def nbytes(self) -> int:
        return int(sum(p.nbytes for p in self._parts))


class SlotLists:
    """Per slot, an ordered list of row ids."""

    #: room left behind tolerated beyond the room in use before the lists are laid out again
    SLACK = 1 << 16

    def __init__(self, min_capacity: int = 4) -> None:
        self.min_capacity = max(1, min_capacity)
        self.n_slots = 0
        # per slot (the first n_slots entries; the arrays grow by doubling)
        self._start = np.zeros(1024, np.int64)
        self._count = np.zeros(1024, np.int64)
        self._cap = np.zeros(1024, np.int64)
        self.ids = np.empty(1024, np.int64)
        self.used = 0
        self.total = 0  # ids in every list

    @property
    def start(self) -> np.ndarray:
        return self._start[: self.n_slots]

    @property
    def count(self) -> np.ndarray:
        return self._count[: self.n_slots]

    @property
    def cap(self) -> np.ndarray:
        return self._cap[: self.n_slots]

    def grow(self, n_slots: int) -> None:
        """Slots up to ``n_slots``, the new ones with empty lists."""
        if n_slots > len(self._count):
            size = max(n_slots, 2 * len(self._count))
            self._start, self._count, self._cap = (
                np.concatenate([a, np.zeros(size - len(a), np.int64)])
                for a in (self._start, self._count, self._cap)
            )
        self.n_slots = max(self.n_slots, n_slots)

    def gather(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the ids of the lists of ``slots``, list after list; the slot of each)."""
        counts = self.count[slots]
        total = int(counts.sum())
        if total == 0:
            return _EMPTY, _EMPTY
        owner = np.repeat(slots, counts)
        head = np.repeat(self.start[slots] - (np.cumsum(counts) - counts), counts)
        return self.ids[head + np.arange(total, dtype=np.int64)], owner

    def write(self, slots: np.ndarray, counts: np.ndarray, ids: np.ndarray) -> None:
        """Replace the lists of the distinct ``slots``: ``counts[i]`` ids each, taken in
        turn from ``ids``."""
        self.total += int(counts.sum() - self.count[slots].sum())
        moved = counts > self.cap[slots]
        if moved.any():
            mslots = slots[moved]
            caps = np.maximum(2 * counts[moved], self.min_capacity)
            ends = self.used + np.cumsum(caps)
            self._reserve(int(ends[-1]))
            self.start[mslots] = ends - caps
            self.cap[mslots] = caps
            self.used = int(ends[-1])
        self.count[slots] = counts
        if len(ids):
            head = np.repeat(self.start[slots] - (np.cumsum(counts) - counts), counts)
            self.ids[head + np.arange(len(ids), dtype=np.int64)] = ids
        if self.used > 2 * self.total + self.SLACK:
            self._pack()

    def _reserve(self, size: int) -> None:
        if size > len(self.ids):
            grown = np.empty(max(size, 2 * len(self.ids)), np.int64)
            grown[: self.used] = self.ids[: self.used]
            self.ids = grown

    def _pack(self, new_id: np.ndarray | None = None) -> None:
        """Lay every list out again, back to back (each id ``i`` as ``new_id[i]``)."""
        slots = np.flatnonzero(self.cap > 0)
        ids, _ = self.gather(slots)
        if new_id is not None:
            ids = new_id[ids]
        caps = np.maximum(self.count[slots], np.minimum(self.cap[slots], self.min_capacity))
        start = np.cumsum(caps) - caps
        packed = np.empty(max(int(caps.sum()), 1024), np.int64)
        counts = self.count[slots]
        head = np.repeat(start - (np.cumsum(counts) - counts), counts)
        packed[head + np.arange(len(ids), dtype=np.int64)] = ids
        self.ids = packed
        self._start[: self.n_slots] = 0
        self._cap[: self.n_slots] = 0
        self._start[slots], self._cap[slots] = start, caps
        self.used = int(caps.sum())

    def keep_slots(self, keep: np.ndarray) -> None:
        """Keep only the slots ``keep`` (increasing), renumbered in order."""
        self.total = int(self.count[keep].sum())
        k = len(keep)
        for a in (self._start, self._count, self._cap):
            a[:k] = a[keep]
            a[k : self.n_slots] = 0
        self.n_slots = k
        self._pack()

    def renumber(self, new_id: np.ndarray) -> None:
        """Every listed id ``i`` becomes ``new_id[i]``."""
        self._pack(new_id)

    def load(self, slots: np.ndarray, n_slots: int) -> None:
        """Lists from the slot of each id ``0..len(slots)-1`` (grouped by slot, in order)."""
        count = np.bincount(slots, minlength=n_slots).astype(np.int64)
        cap = np.where(count > 0, np.maximum(count, self.min_capacity), 0)
        self.n_slots = 0
        self._start, self._count, self._cap = (np.zeros(1024, np.int64) for _ in range(3))
        self.grow(n_slots)
        self.count[:], self.cap[:] = count, cap
        self.start[:] = np.cumsum(cap) - cap
        self.used = int(cap.sum())
        self.total = len(slots)
        self.ids = np.empty(max(self.used, 1024), np.int64)
        head = np.repeat(self.start - (np.cumsum(self.count) - self.count), self.count)
        self.ids[head + np.arange(len(slots), dtype=np.int64)] = np.arange(len(slots))

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + 3 * self.count.nbytes)
