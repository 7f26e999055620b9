"""Streaming interval join (kind ``interval_join``): port 0 is the left input, port 1 the right.

A pair matches when the keys are equal (NULL never equals anything) and
``r.ts + lower_us <= l.ts <= r.ts + upper_us`` — for example ``l.ts BETWEEN r.ts -
INTERVAL '5' SECOND AND r.ts + INTERVAL '10' SECOND`` is ``lower_us = -5e6``, ``upper_us =
10e6``. Seen from a left row, its partners have ``l.ts - upper_us <= r.ts <= l.ts -
lower_us``.

Emission (append-only):

- every matching pair exactly once, as soon as its second row arrives (the arriving batch
  is probed against the other side's held rows);
- ``kind = "left"``: a left row that matched nothing is emitted once with NULL right
  columns when no right row can still match it. Right rows arriving later have ``r.ts >=``
  the right watermark, and the latest ``r.ts`` that can match the left row is ``l.ts -
  lower_us``, so the rule is: **emit the unmatched left row when the right watermark is
  strictly greater than ``l.ts - lower_us``, or when the right input ends.** A left row with
  a NULL key or time is emitted (left) or dropped (inner) on arrival.

State, purged by the watermarks:

- a left row is held while a right row could still match it: until the right watermark
  exceeds ``l.ts - lower_us`` (it is not stored at all when that is already so on arrival);
- a right row is held while a left row could still match it: until the left watermark
  exceeds ``r.ts + upper_us`` (left rows to come have ``l.ts >=`` the left watermark).

Times are int64 ordinals of the ordering columns (microseconds for timestamps and dates,
values for integers, unscaled units at ``time_scale`` for decimals) and the bounds are in
the same unit. ``residual`` (a ``pyarrow.compute`` expression over the output columns)
filters the candidate pairs: only pairs passing it are emitted or count as a match.
``lower_us > upper_us`` is an empty range: nothing matches, nothing is held, and a LEFT
join emits every left row unmatched on arrival. ``left_watermark`` / ``right_watermark``
False: that port's watermarks are not in its time column's unit and are ignored (only its
end makes rows final).

A bound may instead be a column of one side (``b.ts BETWEEN a.ts AND a.expires``, Nexmark
q4/q6/q9): ``end_side`` (``"left"`` or ``"right"``) holds ``end_column``, and a pair
matches when the other side's time is at most ``end_column + end_offset``; that side's
constant bound (``lower_us`` when the column is the left's, ``upper_us`` when the right's)
is None. With ``a`` on the left: ``a.ts - upper_us <= b.ts <= a.end + end_offset``. The
state rules are the same with each row's own limit: an ``a`` row is held until the other
side's watermark passes ``a.end + end_offset``; a ``b`` row until ``a``'s watermark passes
the latest ``a.ts`` that can still match it (``b.ts + upper_us``). An ``a`` row whose
``end_column`` is NULL or below its lower bound matches nothing (LEFT emits it unmatched
at once).

Held rows are kept sorted either **by key**, ``(key slot, time)``, or **by time** alone
(every slot 0, the keys' int64 values beside the rows). By key, a batch finds its
partners among the held rows of its keys: each of them checked against its time range
when keys hold few rows (:class:`_Segments`), else two ``numpy.searchsorted`` calls on
packed ``(slot, time)`` codes kept between batches (:class:`_Codes`). By time, the two
searches run on the times, and the keys are compared on the candidate pairs they yield.
Holding by time needs no key index, nor a sort of arriving rows by key, which wins when
time ranges meet few rows (one side far smaller than the other, as a windowed aggregate
joined back to its rows); holding by key wins when many rows of other keys share a time
range (rows open for long). The join counts the pairs a probe by time meets (estimated
from samples while held by key) against the rows arriving, and switches (one re-sort of
the held rows) when one way is clearly cheaper; a probe by time that would meet too many
pairs switches at once. Keys other than integers, dates and timestamps are always held
by key. Against rows with their own end, one more vectorized comparison.

Each held row keeps, beside its time, the latest time of the other side it can match
(``hi``), which is what the watermarks purge by. New rows are merged into the sorted
order in linear time (appended when they come after every held row), their table
appended as it is (:class:`Ranged`). A purge only marks rows gone (they can no longer
match, and probes skip them); the rows are dropped for good on the next insert, or once
they outnumber the live ones.
``state_limit_rows`` bounds the live rows held on *each* side
(:class:`~datum_sql.errors.QueryFailed` naming the side).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.eventtime import event_micros_masked
from datum_sql.engine.operators.base import register
from datum_sql.engine.operators.joins.common import (
    Held,
    Side,
    TwoSidedJoin,
    assemble,
    check_limit,
    common_key_types,
    compact_keys,
    expand,
    keep_residual,
    pack,
)
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex, int64_exact
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME


class Ranged(Held):
    """Held rows in ``(slot, ts)`` order with, per row, the latest time of the other side it
    can still match (``hi``); their table in arrival order: ``perm[i]`` is the
    table row of sorted position ``i``. An insert appends the new rows' table as a chunk
    and merges only the numpy arrays, so holding ``n`` rows costs no ``O(n)`` table copy
    per batch; the table is rewritten in sorted order when rows are dropped, when it holds
    many dropped rows, or when its chunks pile up."""

    #: chunks the table may gather before it is rewritten as one
    MAX_CHUNKS = 64
    #: chunks a take of many rows reads from before they are joined into one; a take of
    #: at most one row in this many is few rows
    FEW_CHUNKS = 4
    FEW_ROWS = 16

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__(schema)
        self.perm = np.empty(0, np.int64)
        self.hi = np.empty(0, np.int64)
        #: per key column, the key values as int64 (held by time only; else empty)
        self.kv: list[np.ndarray] = []
        #: buffers the arrays grow in when rows arrive in order (:meth:`extend`)
        self._grow: dict[str, _Growing] = {}

    def set(self, table: pa.Table, slot: np.ndarray, ts: np.ndarray) -> None:
        super().set(table, slot, ts)
        self.perm = np.arange(len(slot), dtype=np.int64)
        self.hi = np.empty(0, np.int64)
        self.kv = []

    def insert(
        self,
        table: pa.Table,
        order: np.ndarray | slice | None,
        slot: np.ndarray,
        ts: np.ndarray,
        hi: np.ndarray,
        kv: list[np.ndarray],
    ) -> None:
        """Append ``table``'s rows; ``order`` lists, per sorted position, an index among
        the old sorted positions followed by the new rows (None: the new rows follow the
        old ones); ``slot``, ``ts``, ``hi``, ``kv`` are already in that order."""
        old = self.table.num_rows
        perm = np.concatenate([self.perm, old + np.arange(table.num_rows, dtype=np.int64)])
        self.table = pa.concat_tables([self.table, table]) if old else table
        self.slot, self.ts, self.hi, self.kv = slot, ts, hi, kv
        self.perm = perm if order is None else perm[order]
        chunks = self.table.column(0).num_chunks if self.table.num_columns else 0
        if self.table.num_rows > 2 * len(self.perm) + 65_536 or chunks > self.MAX_CHUNKS:
            self._rewrite()

    def extend(
        self,
        table: pa.Table,
        first: int,
        slot: np.ndarray,
        ts: np.ndarray,
        hi: np.ndarray,
        kv: list[np.ndarray],
    ) -> None:
        """Drop the first ``first`` sorted positions and append ``table``'s rows after the
        others (they sort after every held row): amortized in the rows added, not held."""
        old = self.table.num_rows
        perm = old + np.arange(table.num_rows, dtype=np.int64)
        self.table = pa.concat_tables([self.table, table]) if old else table
        current = self.kv if self.kv else [np.empty(0, np.int64) for _ in kv]
        self.slot = self._grown("slot", self.slot, first, slot)
        self.ts = self._grown("ts", self.ts, first, ts)
        self.hi = self._grown("hi", self.hi, first, hi)
        self.perm = self._grown("perm", self.perm, first, perm)
        self.kv = [self._grown(f"kv{i}", c, first, k) for i, (c, k) in enumerate(zip(current, kv))]
        chunks = self.table.column(0).num_chunks if self.table.num_columns else 0
        if self.table.num_rows > 2 * len(self.perm) + 65_536 or chunks > self.MAX_CHUNKS:
            self._rewrite()

    def _grown(self, name: str, current: np.ndarray, first: int, new: np.ndarray) -> np.ndarray:
        grow = self._grow.get(name)
        if grow is None:
            grow = self._grow[name] = _Growing()
        return grow.extend(current, first, new)

    def take(self, idx: np.ndarray) -> None:
        if idx.dtype == np.bool_:
            if idx.all():
                return
            idx = np.flatnonzero(idx)
        self.slot, self.ts, self.perm = self.slot[idx], self.ts[idx], self.perm[idx]
        self.hi = self.hi[idx]
        self.kv = [k[idx] for k in self.kv]
        if self.table.num_rows > 2 * len(self.perm) + 65_536:
            self._rewrite()

    def reorder(self, order: np.ndarray, slot: np.ndarray, kv: list[np.ndarray]) -> None:
        """Put the sorted positions in ``order`` with new ``slot`` and ``kv`` (given in
        the old order): a change of what the rows are sorted by."""
        self.slot, self.ts, self.hi = slot[order], self.ts[order], self.hi[order]
        self.perm = self.perm[order]
        self.kv = [k[order] for k in kv]
        self._rewrite()

    def rows(self, idx: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """The table and its rows for sorted positions ``idx``. A take across chunks joins
        them first (Arrow's does, at every take): many rows are taken after joining the
        chunks for good, a few from each chunk they lie in."""
        chunks = self.table.column(0).num_chunks if self.table.num_columns else 0
        if chunks > 1 and len(idx) * self.FEW_ROWS <= self.table.num_rows:
            return _take_few(self.table, self.perm[idx]), np.arange(len(idx), dtype=np.int64)
        if chunks > self.FEW_CHUNKS:
            self.table = self.table.combine_chunks()
        return self.table, self.perm[idx]

    def sorted_table(self) -> pa.Table:
        self._rewrite()
        return self.table

    def _rewrite(self) -> None:
        n = len(self.perm)
        if n == self.table.num_rows and np.array_equal(self.perm, np.arange(n)):
            return
        if n > 1 and self.perm[-1] - self.perm[0] == n - 1 and bool((np.diff(self.perm) > 0).all()):
            # one run of the table's rows, in order (held by time, purged from the front):
            # a slice drops the chunks before it without copying the rows after
            self.table = self.table.slice(int(self.perm[0]), n)
            if self.table.num_columns and self.table.column(0).num_chunks > self.MAX_CHUNKS:
                self.table = self.table.combine_chunks()
        else:
            self.table = self.table.take(pa.array(self.perm, pa.int64())).combine_chunks()
        self.perm = np.arange(n, dtype=np.int64)


@register("interval_join")
class IntervalJoin(TwoSidedJoin):
    """``l [LEFT] JOIN r ON l.k = r.k AND l.ts BETWEEN r.ts + lower AND r.ts + upper`` (or a
    bound on a column of one side: ``end_side``)."""

    CLOSES_ON_WATERMARK = True
    KIND = "interval_join"
    STATE_VERSION = 1
    WHAT = "an interval join"
    TIMED = True
    #: held by time while the pairs its time ranges meet stay within this many per
    #: arriving row (checking a key on a pair costs a few numpy passes; keying a row costs
    #: a key-index lookup and a sort); back by key above ``BY_KEY`` per row
    BY_TIME = 8
    BY_KEY = 32
    #: weight of the past in those sums, per batch
    DECAY = 0.9
    #: a probe by time meeting more pairs than this many per row involved (plus the
    #: constant) is not expanded: the join holds by key and probes again
    TOO_MANY = 16
    TOO_MANY_MIN = 1 << 20
    #: held by key, a probe checks every held row of its keys while they average at
    #: most this many per query (else it searches their time ranges)
    PER_KEY = 8

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        end_side = config.get("end_side")
        if end_side not in (None, "left", "right"):
            raise PlanError(f"{name}: end_side must be 'left' or 'right', got {end_side!r}")
        #: Port of the side whose rows carry their own end (None: both bounds constant).
        self._end_port: int | None = None if end_side is None else ("left", "right").index(end_side)
        self._end_col: str | None = config.get("end_column")
        self._end_offset = int(config.get("end_offset") or 0)
        lower, upper = config.get("lower_us"), config.get("upper_us")
        want = [lower is not None or self._end_port == 0, upper is not None or self._end_port == 1]
        if not all(want) or (self._end_port is not None and self._end_col is None):
            raise PlanError(
                f"{name}: an interval join needs lower_us and upper_us, or end_side and "
                "end_column in place of the bound on that side"
            )
        self._lower = None if self._end_port == 0 else int(lower)  # type: ignore[arg-type]
        self._upper = None if self._end_port == 1 else int(upper)  # type: ignore[arg-type]
        #: lower > upper: the range is empty, no pair matches (LEFT keeps every left row).
        self._empty = (
            self._lower is not None and self._upper is not None and self._lower > self._upper
        )
        self._residual: pc.Expression | None = config.get("residual")
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._types = common_key_types(self._left.key_types, self._right.key_types)
        self._index = KeyIndex(self._types)
        #: Held by time only (every slot 0), the keys compared on the candidate pairs:
        #: possible when every key compares as an int64 (:func:`~datum_sql.engine.state.keys.int64_exact`).
        self._by_time = False
        self._time_ok = bool(self._types) and all(int64_exact(t) for t in self._types)
        #: decayed sums of the pairs a probe by time meets (counted or estimated) and of
        #: the rows arriving: what chooses between holding by key and by time
        self._candidates = 0.0
        self._arrived = 0.0
        #: whether a probe met held rows yet (before that, no pair count says anything)
        self._probed = False
        self._lwm = START_OF_TIME
        self._rwm = START_OF_TIME
        self._lrows = Ranged(self._left.schema)  # sorted by (slot, ts)
        self._matched = np.empty(0, np.bool_)  # per held left row
        self._grow_matched = _Growing()
        self._rrows = Ranged(self._right.schema)  # sorted by (slot, ts)
        #: per held row: purged (no longer matches, dropped at the next compaction)
        self._lgone = _Gone()
        self._rgone = _Gone()
        self._lcodes = _Codes()
        self._rcodes = _Codes()
        self._lsegs = _Segments()
        self._rsegs = _Segments()

    # -- pieces -----------------------------------------------------------------------
    def _keys(self) -> KeyIndex:
        """The index that gives arriving rows their slots: none (slot 0) held by time."""
        return _NO_KEYS if self._by_time else self._index

    def _limits(
        self, port: int, table: pa.Table, ts: np.ndarray
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | None]:
        """For rows of ``port`` (valid ones: ``table``, ``ts``): the earliest (None:
        unbounded) and latest time of the other side each can match, and which match
        nothing (an end that is NULL or below the lower limit; None: none)."""
        if port == 0:
            lo = None if self._upper is None else ts - self._upper
            hi = None if self._lower is None else ts - self._lower
        else:
            lo = None if self._lower is None else ts + self._lower
            hi = None if self._upper is None else ts + self._upper
        if hi is not None:
            return lo, hi, None
        side = self._left if port == 0 else self._right
        end, valid = event_micros_masked(table.column(self._end_col), side.time_scale)
        hi = end + self._end_offset
        dead = ~valid if lo is None else ~valid | (hi < lo)
        return lo, hi, dead if dead.any() else None

    def _probe(
        self,
        port: int,
        held: Ranged,
        slot: np.ndarray,
        ts: np.ndarray,
        lo: np.ndarray | None,
        hi: np.ndarray,
        kv: list[np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Pairs (query row, held row) with equal keys, ``lo <= held.ts <= hi``, and, when
        the held side's rows carry their own end, ``query ts <= held.hi``. None when held
        by time and the time ranges alone hold too many pairs (hold by key instead)."""
        if self._empty or not len(held) or not len(slot):
            empty = np.empty(0, np.int64)
            return empty, empty
        self._probed = True
        if not self._by_time and self._time_ok:
            self._candidates += _estimate(held.ts, lo, hi)
        found = None if self._by_time else self._by_segment(port, held, slot, lo, hi)
        if found is None:
            found = self._by_search(port, held, slot, lo, hi)
            if found is None:
                return None
        qi, hj = found
        gone = self._lgone if port == 1 else self._rgone
        if gone.count and len(hj):
            live = ~gone.mask[hj]
            qi, hj = qi[live], hj[live]
        if self._end_port is not None and self._end_port != port and len(qi):
            ok = ts[qi] <= held.hi[hj]
            qi, hj = qi[ok], hj[ok]
        if self._by_time and len(qi):
            ok = kv[0][qi] == held.kv[0][hj]
            for q, h in zip(kv[1:], held.kv[1:]):
                ok &= q[qi] == h[hj]
            qi, hj = qi[ok], hj[ok]
        return qi, hj

    def _by_segment(
        self,
        port: int,
        held: Ranged,
        slot: np.ndarray,
        lo: np.ndarray | None,
        hi: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Candidate pairs from every held row of the query's key, kept by time: when
        keys hold few rows each (a unique id), cheaper than two binary searches per
        query. None when the keys' rows are too many to check one by one."""
        segments = self._lsegs if port == 1 else self._rsegs
        start = segments.of(held.slot)
        top = len(start) - 1
        a = start[np.minimum(slot, top)]
        b = start[np.minimum(slot + 1, top)]
        total = int((b - a).sum())
        if total > self.PER_KEY * len(slot):
            return None
        qi, hj = expand(a, b)
        t = held.ts[hj]
        ok = t <= hi[qi]
        if lo is not None:
            ok &= t >= lo[qi]
        return qi[ok], hj[ok]

    def _by_search(
        self,
        port: int,
        held: Ranged,
        slot: np.ndarray,
        lo: np.ndarray | None,
        hi: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Candidate pairs by two binary searches per query on the packed ``(slot, time)``
        codes; None when held by time and they are too many (see :meth:`_probe`)."""
        if lo is None:  # no lower limit: from the key's first held row
            lo = np.full(len(slot), held.ts.min(), np.int64)
        codes = self._lcodes if port == 1 else self._rcodes
        found = (held.ts, lo, hi) if self._by_time else codes.queries(held, slot, lo, hi)
        if found is None:
            ph, plo, phi = pack([held.slot, slot, slot], [held.ts, lo, hi])
        else:
            ph, plo, phi = found
        # one sort of the queries serves both bounds: lo and hi rise together (none
        # needed when they arrive in order)
        order = None
        if len(plo) >= 1024 and not bool((plo[1:] >= plo[:-1]).all()):
            order = np.argsort(plo)
        a = _search(ph, plo, "left", order)
        b = _search(ph, phi, "right", order)
        if self._by_time:
            total = int(np.maximum(b - a, 0).sum())
            if total > self.TOO_MANY * (len(slot) + len(held)) + self.TOO_MANY_MIN:
                return None
            self._candidates += total
        return expand(a, b)

    def _pairs(
        self,
        port: int,
        table: pa.Table,
        slot: np.ndarray,
        ts: np.ndarray,
        lo: np.ndarray | None,
        hi: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """The pairs of ``port``'s valid rows ``table`` with the other side's held rows
        (:meth:`_probe`), and the rows' slots and key values (both as held now)."""
        held = self._rrows if port == 0 else self._lrows
        side = self._left if port == 0 else self._right
        kv = self._values(side, table)
        found = self._probe(port, held, slot, ts, lo, hi, kv)
        if found is None:  # too many pairs by time alone: hold by key from now on
            self._hold_by_key()
            slot, kv = self._slots(side, table), []
            found = self._probe(port, held, slot, ts, lo, hi, kv)
            assert found is not None
        return found[0], found[1], slot, kv

    def _values(self, side: Side, table: pa.Table) -> list[np.ndarray]:
        """The key values of ``table``'s rows (all valid) when held by time, else []."""
        if not self._by_time:
            return []
        return _key_values(side.key_columns(table, self._types))

    def _slots(self, side: Side, table: pa.Table) -> np.ndarray:
        """The key slots of ``table``'s rows (all valid)."""
        slots, _ = self._index.slots(side.key_columns(table, self._types))
        return slots

    def _choose(self, arrived: int) -> None:
        """Hold by time when the pairs that time ranges alone meet are few beside the
        rows arriving (a key index then costs more than checking keys on the pairs:
        one side far smaller than the other, or keys that rarely repeat), by key when
        they are many."""
        self._candidates *= self.DECAY
        self._arrived = self._arrived * self.DECAY + arrived
        if not self._by_time and self._time_ok and self._probed:
            if self._candidates <= self.BY_TIME * self._arrived:
                self._hold_by_time()
        elif self._by_time and self._candidates > self.BY_KEY * self._arrived:
            self._hold_by_key()

    def _hold_by_time(self) -> None:
        for port in (0, 1):
            held, side = (self._lrows, self._left) if port == 0 else (self._rrows, self._right)
            kv = [v[held.perm] for v in _key_values(side.key_columns(held.table, self._types))]
            order = np.argsort(held.ts, kind="stable")
            held.reorder(order, np.zeros(len(held), np.int64), kv)
            self._reordered(port, order)
        self._by_time = True
        self._index = KeyIndex(self._types)

    def _hold_by_key(self) -> None:
        self._by_time = False
        self._index = KeyIndex(self._types)
        for port in (0, 1):
            held, side = (self._lrows, self._left) if port == 0 else (self._rrows, self._right)
            table, rows = held.rows(np.arange(len(held), dtype=np.int64))
            slot = self._slots(side, table.take(pa.array(rows, pa.int64())))
            (code,) = pack([slot], [held.ts])
            order = np.argsort(code, kind="stable")
            held.reorder(order, slot, [])
            self._reordered(port, order)

    def _reordered(self, port: int, order: np.ndarray) -> None:
        """Carry the per-row state of ``port``'s held rows through a new sort ``order``."""
        gone = self._lgone if port == 0 else self._rgone
        gone.mask = gone.mask[order]
        if port == 0:
            self._matched = self._matched[order]

    @staticmethod
    def _insert(
        held: Ranged,
        gone: _Gone,
        table: pa.Table,
        slot: np.ndarray,
        ts: np.ndarray,
        hi: np.ndarray,
        kv: list[np.ndarray],
    ) -> np.ndarray | slice | None:
        """Add rows keeping ``held`` sorted and drop its purged rows; returns, for each
        row now held, its index among the old rows followed by the added ones (None:
        the added rows simply follow the old ones)."""
        old = len(held)
        # Rows in (slot, ts) order after every held row (the common case: time-ordered
        # rows of new keys) are appended: told from the added rows and the last held one,
        # without packing the codes of every held row.
        first = gone.count
        if (
            _rising(slot, ts, by_slot=not kv)
            and (not old or _not_before(slot, ts, held.slot, held.ts, by_slot=not kv))
            and (not first or gone.mask[:first].all())  # the purged rows come first
        ):
            held.extend(table, first, slot, ts, hi, kv)
            gone.reset(len(held))
            return slice(first, None) if first else None
        if kv:  # held by time (every slot 0): the times are the codes
            old_code, new_code = held.ts, ts
        else:
            old_code, new_code = pack([held.slot, slot], [held.ts, ts])
        all_slot = np.concatenate([held.slot, slot])
        all_ts = np.concatenate([held.ts, ts])
        all_hi = np.concatenate([held.hi, hi])
        old_kv = held.kv if held.kv else [np.empty(0, np.int64) for _ in kv]
        all_kv = [np.concatenate([h, k]) for h, k in zip(old_kv, kv)]
        added = np.argsort(new_code, kind="stable")
        # merge: an added row goes after the old rows with codes <= its code
        at = np.searchsorted(old_code, new_code[added], "right") + np.arange(len(added))
        order = np.empty(old + len(added), np.int64)
        is_old = np.ones(len(order), np.bool_)
        is_old[at] = False
        order[at] = old + added
        order[is_old] = np.arange(old, dtype=np.int64)
        if gone.count:
            order = order[~np.concatenate([gone.mask, np.zeros(len(added), np.bool_)])[order]]
        held.insert(
            table, order, all_slot[order], all_ts[order], all_hi[order], [k[order] for k in all_kv]
        )
        gone.reset(len(held))
        return order

    @staticmethod
    def _purge(held: Ranged, gone: _Gone, keep: np.ndarray) -> np.ndarray | None:
        """Mark the held rows not in ``keep`` gone; drop them once they outnumber the live
        rows. Returns the kept positions when rows were dropped (else None)."""
        gone.add(~keep)
        if gone.count * 2 <= len(held):
            return None
        alive = np.flatnonzero(~gone.mask)
        held.take(alive)
        gone.reset(len(held))
        return alive

    def _null_right(self, table: pa.Table, rows: np.ndarray | None) -> pa.RecordBatch:
        return assemble(self._schema, self._left, table, rows, self._right, None)

    def _check(self) -> None:
        check_limit(
            self.name,
            "left",
            len(self._lrows) - self._lgone.count,
            self._limit,
            "left rows are held until the right watermark passes the latest right time they "
            "can match; raise the limit, narrow the interval or reduce the right input's "
            "watermark delay",
        )
        check_limit(
            self.name,
            "right",
            len(self._rrows) - self._rgone.count,
            self._limit,
            "right rows are held until the left watermark passes the latest left time they "
            "can match; raise the limit, narrow the interval or reduce the left input's "
            "watermark delay",
        )

    # -- hooks ------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        out = self._left_batch(batch) if port == 0 else self._right_batch(batch)
        self._check()
        self._choose(batch.num_rows)
        return out

    @staticmethod
    def _alive(
        table: pa.Table,
        slot: np.ndarray,
        ts: np.ndarray,
        lo: np.ndarray | None,
        hi: np.ndarray,
        dead: np.ndarray,
    ) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        live = ~dead
        return (
            table.filter(pa.array(live)),
            slot[live],
            ts[live],
            None if lo is None else lo[live],
            hi[live],
        )

    def _left_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        table = self._left.project(batch)
        valid, slot, ts = self._left.prepare(table, self._keys(), self._types)
        out: list[pa.RecordBatch] = []
        if valid is not None:
            if self._kind == "left":
                out.append(self._null_right(table.filter(pa.array(~valid)), None))
            table = table.filter(pa.array(valid))
        if not len(ts):
            return out
        lo, hi, dead = self._limits(0, table, ts)
        if dead is not None:  # rows that match nothing: done on arrival
            if self._kind == "left":
                out.append(self._null_right(table, np.flatnonzero(dead)))
            table, slot, ts, lo, hi = self._alive(table, slot, ts, lo, hi, dead)
            if not len(ts):
                return out
        qi, hj, slot, kv = self._pairs(0, table, slot, ts, lo, hi)
        matched = np.zeros(len(ts), np.bool_)
        if len(qi):
            pairs = assemble(
                self._schema,
                self._left,
                table,
                _all(qi, len(ts)),
                self._right,
                *self._rrows.rows(hj),
            )
            qi = keep_residual(pairs, self._residual, qi, out)
            matched[qi] = True
        # rows a later right row can still match are held; the others are done
        open_ = (hi >= self._rwm) if self._rwm < END_OF_TIME and not self._empty else None
        if open_ is None or not open_.any():
            done = None if open_ is None else np.ones(len(ts), np.bool_)
        else:
            done = ~open_
            rows = None if open_.all() else np.flatnonzero(open_)
            order = self._insert(self._lrows, self._lgone, *_rows(table, rows, slot, ts, hi, kv))
            added = matched if rows is None else matched[rows]
            if order is None or isinstance(order, slice):  # appended after the others
                first = 0 if order is None else order.start
                self._matched = self._grow_matched.extend(self._matched, first, added)
            else:
                self._matched = np.concatenate([self._matched, added])[order]
        if self._kind == "left":
            unmatched = ~matched if done is None else done & ~matched
            if unmatched.any():
                out.append(self._null_right(table, np.flatnonzero(unmatched)))
        return out

    def _right_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        table = self._right.project(batch)
        valid, slot, ts = self._right.prepare(table, self._keys(), self._types)
        if valid is not None:
            table = table.filter(pa.array(valid))
        if not len(ts):
            return []
        lo, hi, dead = self._limits(1, table, ts)
        if dead is not None:
            table, slot, ts, lo, hi = self._alive(table, slot, ts, lo, hi, dead)
            if not len(ts):
                return []
        out: list[pa.RecordBatch] = []
        qi, hj, slot, kv = self._pairs(1, table, slot, ts, lo, hi)
        if len(qi):
            pairs = assemble(
                self._schema,
                self._left,
                *self._lrows.rows(hj),
                self._right,
                table,
                _all(qi, len(ts)),
            )
            self._matched[keep_residual(pairs, self._residual, hj, out)] = True
        if self._lwm < END_OF_TIME and not self._empty:
            keep = hi >= self._lwm
            if keep.any():
                rows = None if keep.all() else np.flatnonzero(keep)
                self._insert(self._rrows, self._rgone, *_rows(table, rows, slot, ts, hi, kv))
        return out

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        mark = self.usable_watermark(watermark, port)
        if mark is None:
            return out
        if port == 0:
            self._lwm = max(self._lwm, mark)
            held = self._rrows
            if len(held):
                if self._lwm >= END_OF_TIME:
                    held.clear()
                    self._rgone.reset(0)
                else:
                    self._purge(held, self._rgone, held.hi >= self._lwm)
        else:
            self._rwm = max(self._rwm, mark)
            out = self._close_left(
                None if self._rwm >= END_OF_TIME else self._lrows.hi >= self._rwm
            )
        compact_keys(self._index, [self._lrows, self._rrows])
        return out

    def _close_left(self, keep: np.ndarray | None) -> list[pa.RecordBatch]:
        """Drop held left rows not in ``keep`` (None: all), emitting unmatched ones (left)."""
        held = self._lrows
        if not len(held) or (keep is not None and keep.all()):
            return []
        out: list[pa.RecordBatch] = []
        closing = ~self._lgone.mask if keep is None else ~keep & ~self._lgone.mask
        unmatched = closing & ~self._matched
        if self._kind == "left" and unmatched.any():
            out.append(self._null_right(*held.rows(np.flatnonzero(unmatched))))
        if keep is None:
            held.clear()
            self._lgone.reset(0)
            self._matched = np.empty(0, np.bool_)
        else:
            alive = self._purge(held, self._lgone, keep)
            if alive is not None:
                self._matched = self._matched[alive]
        return out

    def on_close(self) -> list[pa.RecordBatch]:
        self._rwm = self._lwm = END_OF_TIME
        out = self._close_left(None)
        self._rrows.clear()
        self._rgone.reset(0)
        return out

    def _drop_gone(self) -> None:
        """Drop every purged row for good (before a snapshot)."""
        if self._lgone.count:
            alive = np.flatnonzero(~self._lgone.mask)
            self._lrows.take(alive)
            self._matched = self._matched[alive]
            self._lgone.reset(len(self._lrows))
        if self._rgone.count:
            self._rrows.take(~self._rgone.mask)
            self._rgone.reset(len(self._rrows))

    # -- checkpoints and status -------------------------------------------------------
    def snapshot(self) -> bytes | None:
        self._drop_gone()
        meta = {"left_watermark": self._lwm, "right_watermark": self._rwm}
        tables = {
            "left": self._lrows.sorted_table(),
            "left_matched": pa.table({"matched": pa.array(self._matched, pa.bool_())}),
            "right": self._rrows.sorted_table(),
        }
        return encode_state(self.KIND, self.STATE_VERSION, meta, tables)

    def _held(self, port: int, table: pa.Table) -> tuple[Ranged, np.ndarray | slice]:
        """Held rows rebuilt from a snapshot's table (each row's limit recomputed)."""
        side = self._left if port == 0 else self._right
        held = Ranged(side.schema)
        table = table.cast(side.schema)
        _, slot, ts = side.prepare(table, self._index, self._types)
        _, hi, _ = self._limits(port, table, ts)
        order = self._insert(held, _Gone(), table, slot, ts, hi, [])
        return held, np.arange(len(held), dtype=np.int64) if order is None else order

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        self._lwm = int(meta["left_watermark"])
        self._rwm = int(meta["right_watermark"])
        self._index = KeyIndex(self._types)
        self._by_time = False  # held by key again; the next batches choose
        self._lrows, order = self._held(0, tables["left"])
        matched = tables["left_matched"].column("matched").to_numpy(zero_copy_only=False)
        self._matched = np.asarray(matched, np.bool_)[order]
        self._rrows, _ = self._held(1, tables["right"])
        self._lgone.reset(len(self._lrows))
        self._rgone.reset(len(self._rrows))

    def state_size(self) -> tuple[int, int]:
        rows = len(self._lrows) - self._lgone.count + len(self._rrows) - self._rgone.count
        nbytes = self._lrows.nbytes + self._rrows.nbytes + self._matched.nbytes
        nbytes += self._lrows.hi.nbytes + self._rrows.hi.nbytes
        return rows, nbytes + self._index.nbytes

    def describe(self) -> dict[str, Any]:
        return {
            "left_rows_held": len(self._lrows) - self._lgone.count,
            "right_rows_held": len(self._rrows) - self._rgone.count,
            "left_watermark": self.format_mark(self._lwm),
            "right_watermark": self.format_mark(self._rwm),
            "keys": self._index.n_slots,
            "held_by": "time" if self._by_time else "key",
        }


_NO_KEYS = KeyIndex([])


def _key_values(columns: list[pa.Array]) -> list[np.ndarray]:
    """int64 numpy views of key columns without NULLs (types :func:`~datum_sql.engine.state.keys.int64_exact`)."""
    out = []
    for col in columns:
        if pa.types.is_integer(col.type):
            col = col.cast(pa.int64())
        else:
            col = col.view(pa.int64() if col.type.bit_width == 64 else pa.int32())
        out.append(np.asarray(col.to_numpy(zero_copy_only=False), np.int64))
    return out


#: held rows and queries sampled to estimate the pairs a probe by time would meet
_SAMPLE = 512


def _estimate(ts: np.ndarray, lo: np.ndarray | None, hi: np.ndarray) -> float:
    """About how many of the held times ``ts`` lie in the queries' ``[lo, hi]`` (lo None:
    no lower limit), from a sample of each."""
    step = max(1, len(ts) // _SAMPLE)
    sample = np.sort(ts[::step])
    qstep = max(1, len(hi) // _SAMPLE)
    found = np.searchsorted(sample, hi[::qstep], "right")
    if lo is not None:
        found = found - np.searchsorted(sample, lo[::qstep], "left")
    hits = float(np.maximum(found, 0).sum())
    return hits * (len(ts) / len(sample)) * (len(hi) / len(found))


def _rising(slot: np.ndarray, ts: np.ndarray, by_slot: bool) -> bool:
    """Whether the rows are in ``(slot, ts)`` order (``ts`` order when not ``by_slot``):
    the order of their :func:`~.common.pack` codes."""
    if len(ts) < 2:
        return True
    later = ts[1:] >= ts[:-1]
    if not by_slot:
        return bool(later.all())
    s0, s1 = slot[:-1], slot[1:]
    return bool(((s1 > s0) | ((s1 == s0) & later)).all())


def _not_before(
    slot: np.ndarray, ts: np.ndarray, held_slot: np.ndarray, held_ts: np.ndarray, by_slot: bool
) -> bool:
    """Whether the first row is at or after the last held row in ``(slot, ts)`` order."""
    if not by_slot:
        return bool(ts[0] >= held_ts[-1])
    return (int(slot[0]), int(ts[0])) >= (int(held_slot[-1]), int(held_ts[-1]))


def _all(rows: np.ndarray, n: int) -> np.ndarray | None:
    """``rows`` of a batch of ``n`` rows, or None when they are every row in order (each
    row in one pair: the batch itself, not a copy)."""
    whole = len(rows) == n and n and rows[0] == 0 and rows[-1] == n - 1
    return None if whole and bool((rows[1:] > rows[:-1]).all()) else rows


def _rows(
    table: pa.Table,
    rows: np.ndarray | None,
    slot: np.ndarray,
    ts: np.ndarray,
    hi: np.ndarray,
    kv: list[np.ndarray],
) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Rows ``rows`` (None: all) of a batch and its per-row arrays."""
    if rows is None:
        return table, slot, ts, hi, kv
    return (
        table.take(pa.array(rows, pa.int64())),
        slot[rows],
        ts[rows],
        hi[rows],
        [k[rows] for k in kv],
    )


class _Gone:
    """Which held rows of one side are purged: a mask beside the rows, and its count."""

    def __init__(self) -> None:
        self.mask = np.zeros(0, np.bool_)
        self.count = 0

    def reset(self, n: int) -> None:
        self.mask = np.zeros(n, np.bool_)
        self.count = 0

    def add(self, rows: np.ndarray) -> None:
        self.mask |= rows
        self.count = int(np.count_nonzero(self.mask))


def _take_few(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table.take(rows)`` read from the chunks ``rows`` lie in (one take per chunk met,
    not a join of every chunk)."""
    if not len(rows):
        return table.slice(0, 0)
    batches = table.to_batches()
    ends = np.cumsum([b.num_rows for b in batches])
    chunk = np.searchsorted(ends, rows, "right")
    parts, order = [], []
    for c in np.unique(chunk):  # the chunks met, a few
        at = np.flatnonzero(chunk == c)
        start = int(ends[c]) - batches[c].num_rows
        parts.append(batches[c].take(pa.array(rows[at] - start, pa.int64())))
        order.append(at)
    got = pa.Table.from_batches(parts, table.schema).combine_chunks()
    back = np.empty(len(rows), np.int64)
    back[np.concatenate(order)] = np.arange(len(rows), dtype=np.int64)
    return got.take(pa.array(back, pa.int64()))


class _Growing:
    """A 1-D array that loses rows at its front and gains rows at its back in time
    amortized in the rows gained: a view of a buffer with room after it."""

    def __init__(self) -> None:
        self._buf: np.ndarray | None = None
        self._view: np.ndarray | None = None
        self._lo = 0
        self._hi = 0

    def extend(self, current: np.ndarray, first: int, new: np.ndarray) -> np.ndarray:
        """``current[first:]`` followed by ``new``; ``current`` is copied into a buffer
        unless it is the view this returned last."""
        if self._buf is None or self._view is not current:
            self._buf, self._lo, self._hi = current, 0, len(current)
            room = 0
        else:
            room = len(self._buf) - self._hi
        lo = self._lo + first
        if len(new) > room:  # a new buffer, twice what it must hold
            live = self._hi - lo
            buf = np.empty(2 * (live + len(new)) + 1024, current.dtype)
            buf[:live] = self._buf[lo : self._hi]
            self._buf, lo, self._hi = buf, 0, live
        assert self._buf is not None
        self._buf[self._hi : self._hi + len(new)] = new
        self._hi += len(new)
        self._lo = lo
        self._view = self._buf[lo : self._hi]
        return self._view


class _Segments:
    """Where each key slot's rows start among one side's held rows (sorted by slot):
    ``start[s]:start[s + 1]``, kept while the rows are. The starts are written into one
    buffer kept across calls (grown as needed): a fresh array per change of the rows costs
    a page fault per 4 KiB, more than the counting itself."""

    def __init__(self) -> None:
        self._of: np.ndarray | None = None
        self._buf = np.zeros(1, np.int64)
        self._start = self._buf[:1]

    def of(self, slot: np.ndarray) -> np.ndarray:
        """The starts for ``slot``; valid until the next call with other rows."""
        if self._of is not slot:
            self._of = slot
            counts = np.bincount(slot) if len(slot) else np.empty(0, np.int64)
            if len(counts) + 1 > len(self._buf):
                self._buf = np.empty(2 * len(counts) + 1, np.int64)
            self._start = self._buf[: len(counts) + 1]
            self._start[0] = 0
            np.cumsum(counts, out=self._start[1:])
        return self._start


class _Codes:
    """The packed ``(slot, time)`` codes of one side's held rows, kept while the rows are.

    Codes are ``slot * span + (ts - base)`` over the held times widened by one unit each
    way; a query time is clamped into that range first, which leaves every search answer
    unchanged (all held times lie strictly inside it). When the codes would not fit in
    int64, :func:`pack` answers instead.
    """

    def __init__(self) -> None:
        self._of: tuple[np.ndarray, np.ndarray] | None = None
        self._codes = np.empty(0, np.int64)
        self._base = 0
        self._span = 0

    def queries(
        self, held: Ranged, slot: np.ndarray, lo: np.ndarray, hi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(held codes, codes of ``lo``, codes of ``hi``), or None when they do not fit."""
        if self._of is None or self._of[0] is not held.slot or self._of[1] is not held.ts:
            self._of = (held.slot, held.ts)
            self._base = int(held.ts.min()) - 1
            self._span = int(held.ts.max()) - self._base + 2
            top = int(held.slot.max()) + 1
            self._codes = (
                held.slot * self._span + (held.ts - self._base)
                if top * self._span < 2**62
                else np.empty(0, np.int64)
            )
        if not len(self._codes) or (int(slot.max()) + 1) * self._span >= 2**62:
            return None
        top = self._base + self._span - 1
        offset = slot * self._span - self._base
        return (
            self._codes,
            offset + np.clip(lo, self._base, top),
            offset + np.clip(hi, self._base, top),
        )


def _search(
    held: np.ndarray, queries: np.ndarray, side: str, order: np.ndarray | None
) -> np.ndarray:
    """``numpy.searchsorted`` of many queries, in the sorted ``order`` when given (which
    keeps the binary searches cache-friendly)."""
    if order is None:
        return np.searchsorted(held, queries, side)  # type: ignore[call-overload]
    out = np.empty(len(queries), np.int64)
    out[order] = np.searchsorted(held, queries[order], side)  # type: ignore[call-overload]
    return out
