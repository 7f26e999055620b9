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

Both sides are kept sorted by ``(key slot, time)``; a batch finds its partners with two
``numpy.searchsorted`` calls on packed ``(slot, time)`` codes (then, against rows with their
own end, one vectorized comparison). Each held row keeps, beside its time, the latest
time of the other side it can match (``hi``), which is what the watermarks purge by.
``state_limit_rows`` bounds the rows held on *each* side
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
    TwoSidedJoin,
    assemble,
    check_limit,
    common_key_types,
    compact_keys,
    expand,
    pack,
    residual_pairs,
    search,
)
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME


class Ranged(Held):
    """Held rows with, per row, the latest time of the other side it can still match."""

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__(schema)
        self.hi = np.empty(0, np.int64)

    def place(self, table: pa.Table, slot: np.ndarray, ts: np.ndarray, hi: np.ndarray) -> None:
        self.set(table, slot, ts)
        self.hi = hi

    def take(self, idx: np.ndarray) -> None:
        if idx.dtype == np.bool_:
            if idx.all():
                return
            idx = np.flatnonzero(idx)
        super().take(idx)
        self.hi = self.hi[idx]

    def clear(self) -> None:
        super().clear()
        self.hi = np.empty(0, np.int64)


@register("interval_join")
class IntervalJoin(TwoSidedJoin):
    """``l [LEFT] JOIN r ON l.k = r.k AND l.ts BETWEEN r.ts + lower AND r.ts + upper`` (or a
    bound on a column of one side: ``end_side``)."""

    KIND = "interval_join"
    STATE_VERSION = 1
    WHAT = "an interval join"
    TIMED = True

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
        self._lwm = START_OF_TIME
        self._rwm = START_OF_TIME
        self._lrows = Ranged(self._left.schema)  # sorted by (slot, ts)
        self._matched = np.empty(0, np.bool_)  # per held left row
        self._rrows = Ranged(self._right.schema)  # sorted by (slot, ts)

    # -- pieces -----------------------------------------------------------------------
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
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pairs (query row, held row) with equal slot, ``lo <= held.ts <= hi``, and, when
        the held side's rows carry their own end, ``query ts <= held.hi``."""
        if self._empty or not len(held) or not len(slot):
            empty = np.empty(0, np.int64)
            return empty, empty
        if lo is None:  # no lower limit: from the key's first held row
            lo = np.full(len(slot), held.ts.min(), np.int64)
        ph, plo, phi = pack([held.slot, slot, slot], [held.ts, lo, hi])
        a = search(ph, plo, "left")
        b = search(ph, phi, "right")
        qi, hj = expand(a, b)
        if self._end_port is not None and self._end_port != port and len(qi):
            ok = ts[qi] <= held.hi[hj]
            qi, hj = qi[ok], hj[ok]
        return qi, hj

    @staticmethod
    def _insert(
        held: Ranged, table: pa.Table, slot: np.ndarray, ts: np.ndarray, hi: np.ndarray
    ) -> np.ndarray:
        """Add rows keeping ``held`` sorted; returns the new position of every old row
        followed by every added row (the permutation applied)."""
        all_slot = np.concatenate([held.slot, slot])
        all_ts = np.concatenate([held.ts, ts])
        (code,) = pack([all_slot], [all_ts])
        order = np.argsort(code, kind="stable")
        merged = pa.concat_tables([held.table, table]) if len(held) else table
        held.place(
            merged.take(pa.array(order, pa.int64())).combine_chunks(),
            all_slot[order],
            all_ts[order],
            np.concatenate([held.hi, hi])[order],
        )
        return order

    def _keep(self, pairs: pa.RecordBatch, left_rows: np.ndarray, out: list) -> np.ndarray:
        """Append the pairs that pass the residual condition to ``out``; their left rows."""
        kept = residual_pairs(pairs, self._residual)
        if kept is None:
            out.append(pairs)
            return left_rows
        if len(kept):
            out.append(pairs.take(pa.array(kept, pa.int64())))
        return left_rows[kept]

    def _null_right(self, table: pa.Table, rows: np.ndarray | None) -> pa.RecordBatch:
        return assemble(self._schema, self._left, table, rows, self._right, None)

    def _check(self) -> None:
        check_limit(
            self.name,
            "left",
            len(self._lrows),
            self._limit,
            "left rows are held until the right watermark passes the latest right time they "
            "can match; raise the limit, narrow the interval or reduce the right input's "
            "watermark delay",
        )
        check_limit(
            self.name,
            "right",
            len(self._rrows),
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
        valid, slot, ts = self._left.prepare(table, self._index, self._types)
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
        qi, hj = self._probe(0, self._rrows, slot, ts, lo, hi)
        matched = np.zeros(len(ts), np.bool_)
        if len(qi):
            pairs = assemble(
                self._schema, self._left, table, qi, self._right, self._rrows.table, hj
            )
            qi = self._keep(pairs, qi, out)
            matched[qi] = True
        # rows a later right row can still match are held; the others are done
        open_ = (hi >= self._rwm) if self._rwm < END_OF_TIME and not self._empty else None
        if open_ is None or not open_.any():
            done = None if open_ is None else np.ones(len(ts), np.bool_)
        else:
            done = ~open_
            rows = np.flatnonzero(open_)
            order = self._insert(
                self._lrows,
                table.take(pa.array(rows, pa.int64())),
                slot[rows],
                ts[rows],
                hi[rows],
            )
            self._matched = np.concatenate([self._matched, matched[rows]])[order]
        if self._kind == "left":
            unmatched = ~matched if done is None else done & ~matched
            if unmatched.any():
                out.append(self._null_right(table, np.flatnonzero(unmatched)))
        return out

    def _right_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        table = self._right.project(batch)
        valid, slot, ts = self._right.prepare(table, self._index, self._types)
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
        qi, hj = self._probe(1, self._lrows, slot, ts, lo, hi)
        if len(qi):
            pairs = assemble(
                self._schema, self._left, self._lrows.table, hj, self._right, table, qi
            )
            self._matched[self._keep(pairs, hj, out)] = True
        if self._lwm < END_OF_TIME and not self._empty:
            keep = hi >= self._lwm
            if keep.any():
                rows = np.flatnonzero(keep)
                self._insert(
                    self._rrows,
                    table.take(pa.array(rows, pa.int64())),
                    slot[rows],
                    ts[rows],
                    hi[rows],
                )
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
                else:
                    held.take(held.hi >= self._lwm)
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
        gone = ~self._matched if keep is None else ~keep & ~self._matched
        if self._kind == "left" and gone.any():
            out.append(self._null_right(held.table, np.flatnonzero(gone)))
        if keep is None:
            held.clear()
            self._matched = np.empty(0, np.bool_)
        else:
            held.take(keep)
            self._matched = self._matched[keep]
        return out

    def on_close(self) -> list[pa.RecordBatch]:
        self._rwm = self._lwm = END_OF_TIME
        out = self._close_left(None)
        self._rrows.clear()
        return out

    # -- checkpoints and status -------------------------------------------------------
    def snapshot(self) -> bytes | None:
        meta = {"left_watermark": self._lwm, "right_watermark": self._rwm}
        tables = {
            "left": self._lrows.table,
            "left_matched": pa.table({"matched": pa.array(self._matched, pa.bool_())}),
            "right": self._rrows.table,
        }
        return encode_state(self.KIND, self.STATE_VERSION, meta, tables)

    def _held(self, port: int, table: pa.Table) -> tuple[Ranged, np.ndarray]:
        """Held rows rebuilt from a snapshot's table (each row's limit recomputed)."""
        side = self._left if port == 0 else self._right
        held = Ranged(side.schema)
        table = table.cast(side.schema)
        _, slot, ts = side.prepare(table, self._index, self._types)
        _, hi, _ = self._limits(port, table, ts)
        return held, self._insert(held, table, slot, ts, hi)

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        self._lwm = int(meta["left_watermark"])
        self._rwm = int(meta["right_watermark"])
        self._index = KeyIndex(self._types)
        self._lrows, order = self._held(0, tables["left"])
        matched = tables["left_matched"].column("matched").to_numpy(zero_copy_only=False)
        self._matched = np.asarray(matched, np.bool_)[order]
        self._rrows, _ = self._held(1, tables["right"])

    def state_size(self) -> tuple[int, int]:
        rows = len(self._lrows) + len(self._rrows)
        nbytes = self._lrows.nbytes + self._rrows.nbytes + self._matched.nbytes
        nbytes += self._lrows.hi.nbytes + self._rrows.hi.nbytes
        return rows, nbytes + self._index.nbytes

    def describe(self) -> dict[str, Any]:
        return {
            "left_rows_held": len(self._lrows),
            "right_rows_held": len(self._rrows),
            "left_watermark": self.format_mark(self._lwm),
            "right_watermark": self.format_mark(self._rwm),
            "keys": self._index.n_slots,
        }
