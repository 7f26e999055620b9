"""Streaming ASOF join (kind ``asof_join``): port 0 is the left input, port 1 the right.

For each left row, among the right rows with equal keys whose time satisfies the
inequality — backward: ``r.ts <= l.ts`` (``<`` when ``strict``), forward: ``r.ts >= l.ts``
(``>`` when ``strict``) — the closest one is chosen (backward: the greatest ``r.ts``;
forward: the least); ties on ``r.ts`` go to the right row that arrived last. With
``tolerance_us`` the chosen row is kept only when ``|l.ts - r.ts| <= tolerance`` (otherwise
no match; the next candidate is never tried). ``kind = "left"`` emits unmatched left rows
with NULL right columns, ``"inner"`` drops them. A NULL key or time never matches: such a
left row is emitted (left) or dropped (inner) as soon as it arrives.

Emission (append-only, each left row exactly once, when final). A right row arriving after
the right watermark ``rwm`` has ``r.ts >= rwm`` (equal is on time), so a left row's result
can no longer change when:

- backward, non-strict: ``rwm > l.ts``; backward, strict: ``rwm >= l.ts``;
- forward: ``rwm > min(best candidate's r.ts, l.ts + tolerance)`` — a right row at the
  candidate's own time could still arrive and win the tie;
- or the right input ended (``rwm`` = +inf).

Left rows already final on arrival are emitted right away; the others wait (in arrival
order) and are resolved on the right watermark that makes them final.

State. Left: the waiting rows. Right: sorted by ``(key slot, r.ts)`` with one row per
``(key, r.ts)`` — a later arrival at the same time replaces the earlier one, which no left
row could choose any more. Let ``T = min(left watermark, time of the oldest waiting left
row)``: every left row still to be resolved has ``l.ts >= T``. Backward keeps, per key, the
newest row with ``r.ts <= T`` (``< T`` when strict) — dropped too when ``r.ts < T -
tolerance`` — plus every newer row; forward drops rows with ``r.ts < T`` (``<= T`` when
strict). When the left input has ended and nothing waits, the right state is empty. So
right state is bounded by the distinct keys plus the right rows newer than ``T``.

Times, ``tolerance_us`` and watermarks are int64 ordinals of the ordering columns (see
:mod:`~datum_sql.engine.eventtime`); a port whose ``*_watermark`` config is False ignores
its watermarks (they follow another column) and resolves only at its end.

``state_limit_rows`` bounds the rows held on *each* side; exceeding it fails the query with
:class:`~datum_sql.errors.QueryFailed` naming the join, the side and the limit.

Matching is vectorized: held right rows and left queries are packed into order-preserving
int64 ``(slot, time)`` codes (:func:`~.common.pack`) and one ``numpy.searchsorted`` finds
every left row's candidate.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.operators.base import register
from datum_sql.engine.operators.joins.common import (
    Held,
    TwoSidedJoin,
    assemble,
    check_limit,
    common_key_types,
    compact_keys,
    pack,
    search,
)
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME

_NEVER = np.iinfo(np.int64).max


@register("asof_join")
class AsofJoin(TwoSidedJoin):
    """``l ASOF [LEFT] JOIN r ON l.k = r.k AND l.ts >= r.ts`` (and the other three forms)."""

    CLOSES_ON_WATERMARK = True
    KIND = "asof_join"
    STATE_VERSION = 1
    WHAT = "an ASOF join"
    TIMED = True

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        direction = config.get("direction") or "backward"
        if direction not in ("backward", "forward"):
            raise PlanError(f"{name}: direction must be 'backward' or 'forward', got {direction!r}")
        self._forward = direction == "forward"
        self._strict = bool(config.get("strict", False))
        tol = config.get("tolerance_us")
        self._tol: int | None = None if tol is None else int(tol)
        if self._tol is not None and self._tol < 0:
            raise PlanError(f"{name}: tolerance must not be negative, got {self._tol} us")
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._types = common_key_types(self._left.key_types, self._right.key_types)
        self._index = KeyIndex(self._types)
        self._lwm = START_OF_TIME
        self._rwm = START_OF_TIME
        self._waiting = Held(self._left.schema)  # left rows not final yet, arrival order
        self._held = Held(self._right.schema)  # right rows, sorted, unique (slot, ts)

    # -- matching ---------------------------------------------------------------------
    def _match(self, slot: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(held row, matched, candidate found before the tolerance filter) per query."""
        held = self._held
        n = len(held)
        if n == 0 or len(ts) == 0:
            none = np.zeros(len(ts), np.bool_)
            return np.zeros(len(ts), np.int64), none, none
        ph, pq = pack([held.slot, slot], [held.ts, ts])
        if self._forward:
            idx = search(ph, pq, "right" if self._strict else "left")
            found = idx < n
            np.minimum(idx, n - 1, out=idx)
        else:
            idx = search(ph, pq, "left" if self._strict else "right") - 1
            found = idx >= 0
            np.maximum(idx, 0, out=idx)
        found &= held.slot[idx] == slot
        ok = found
        if self._tol is not None:
            gap = held.ts[idx] - ts if self._forward else ts - held.ts[idx]
            ok = found & (gap <= self._tol)
        return idx, ok, found

    def _output(
        self, table: pa.Table, rows: np.ndarray | None, idx: np.ndarray, ok: np.ndarray
    ) -> list[pa.RecordBatch]:
        if len(idx) == 0:
            return []
        if self._kind == "inner":
            if not ok.any():
                return []
            sel = np.flatnonzero(ok)
            left_rows = sel if rows is None else rows[sel]
            return [
                assemble(
                    self._schema,
                    self._left,
                    table,
                    left_rows,
                    self._right,
                    self._held.table,
                    idx[sel],
                )
            ]
        return [
            assemble(self._schema, self._left, table, rows, self._right, self._held.table, idx, ok)
        ]

    def _resolve(
        self, table: pa.Table, slot: np.ndarray, ts: np.ndarray
    ) -> tuple[list[pa.RecordBatch], np.ndarray | None]:
        """Emit the rows of ``table`` that are final now; the mask of those that are not
        (None when all were final)."""
        if self._rwm >= END_OF_TIME:
            idx, ok, _ = self._match(slot, ts)
            return self._output(table, None, idx, ok), None
        if not self._forward:
            final = ts <= self._rwm if self._strict else ts < self._rwm
            if final.all():
                idx, ok, _ = self._match(slot, ts)
                return self._output(table, None, idx, ok), None
            rows = np.flatnonzero(final)
            if len(rows) == 0:
                return [], ~final
            idx, ok, _ = self._match(slot[rows], ts[rows])
            return self._output(table, rows, idx, ok), ~final
        idx, ok, found = self._match(slot, ts)
        held_ts = self._held.ts[idx] if len(self._held) else np.zeros(len(ts), np.int64)
        deadline = np.where(found, held_ts, _NEVER)
        if self._tol is not None:
            np.minimum(deadline, ts + self._tol, out=deadline)
        final = self._rwm > deadline
        if final.all():
            return self._output(table, None, idx, ok), None
        rows = np.flatnonzero(final)
        return self._output(table, rows, idx[rows], ok[rows]), ~final

    # -- state upkeep -----------------------------------------------------------------
    def _prune(self) -> None:
        held = self._held
        if not len(held):
            return
        if self._lwm >= END_OF_TIME and not len(self._waiting):
            held.clear()  # no left row will ever look at the right side again
            return
        horizon = self._lwm
        if len(self._waiting):
            horizon = min(horizon, int(self._waiting.ts.min()))
        if horizon <= START_OF_TIME:
            return
        if self._forward:
            keep = held.ts > horizon if self._strict else held.ts >= horizon
        else:
            at_or_below = held.ts <= (horizon - 1 if self._strict else horizon)
            shadowed = np.zeros(len(held), np.bool_)
            shadowed[:-1] = at_or_below[:-1] & at_or_below[1:] & (held.slot[:-1] == held.slot[1:])
            keep = ~shadowed
            if self._tol is not None:
                keep &= ~(at_or_below & (held.ts < horizon - self._tol))
        held.take(keep)

    def _check(self, side: str) -> None:
        if side == "left":
            check_limit(
                self.name,
                "left",
                len(self._waiting),
                self._limit,
                "left rows wait until the right watermark passes them; raise the limit or "
                "reduce the right input's watermark delay",
            )
        else:
            check_limit(
                self.name,
                "right",
                len(self._held),
                self._limit,
                "right rows newer than the left watermark are held per key; raise the limit, "
                "reduce the left input's watermark delay or the number of distinct keys",
            )

    # -- hooks ------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        return self._left_batch(batch) if port == 0 else self._right_batch(batch)

    def _left_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        table = self._left.project(batch)
        valid, slot, ts = self._left.prepare(table, self._index, self._types)
        out: list[pa.RecordBatch] = []
        if valid is not None:
            if self._kind == "left":
                bad = table.filter(pa.array(~valid))
                out.append(assemble(self._schema, self._left, bad, None, self._right, None))
            table = table.filter(pa.array(valid))
        if not len(ts):
            return out
        emitted, rest = self._resolve(table, slot, ts)
        out += emitted
        if rest is not None:
            rows = np.flatnonzero(rest)
            self._waiting.append(table.take(pa.array(rows, pa.int64())), slot[rows], ts[rows])
            self._check("left")
        return out

    def _right_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if self._lwm >= END_OF_TIME and not len(self._waiting):
            return []
        table = self._right.project(batch)
        valid, slot, ts = self._right.prepare(table, self._index, self._types)
        if valid is not None:
            table = table.filter(pa.array(valid))
        if not len(ts):
            return []
        held = self._held
        all_slot = np.concatenate([held.slot, slot])
        all_ts = np.concatenate([held.ts, ts])
        (code,) = pack([all_slot], [all_ts])
        order = np.argsort(code, kind="stable")  # held first, then arrival order
        code = code[order]
        last = np.ones(len(code), np.bool_)
        last[:-1] = code[1:] != code[:-1]  # the last arrival per (key, time) wins
        order = order[last]
        merged = pa.concat_tables([held.table, table]) if len(held) else table
        held.set(
            merged.take(pa.array(order, pa.int64())).combine_chunks(),
            all_slot[order],
            all_ts[order],
        )
        self._prune()
        self._check("right")
        return []

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        out: list[pa.RecordBatch] = []
        mark = self.usable_watermark(watermark, port)
        if mark is None:
            return out
        if port == 0:
            self._lwm = max(self._lwm, mark)
        else:
            self._rwm = max(self._rwm, mark)
            waiting = self._waiting
            if len(waiting):
                out, rest = self._resolve(waiting.table, waiting.slot, waiting.ts)
                if rest is None:
                    waiting.clear()
                else:
                    waiting.take(rest)
        self._prune()
        compact_keys(self._index, [self._waiting, self._held])
        return out

    def on_close(self) -> list[pa.RecordBatch]:
        self._rwm = END_OF_TIME
        self._lwm = END_OF_TIME
        out: list[pa.RecordBatch] = []
        waiting = self._waiting
        if len(waiting):
            out, _ = self._resolve(waiting.table, waiting.slot, waiting.ts)
        waiting.clear()
        self._held.clear()
        return out

    # -- checkpoints and status -------------------------------------------------------
    def snapshot(self) -> bytes | None:
        meta = {"left_watermark": self._lwm, "right_watermark": self._rwm}
        tables = {"left": self._waiting.table, "right": self._held.table}
        return encode_state(self.KIND, self.STATE_VERSION, meta, tables)

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        self._lwm = int(meta["left_watermark"])
        self._rwm = int(meta["right_watermark"])
        self._index = KeyIndex(self._types)
        self._waiting = Held(self._left.schema)
        self._held = Held(self._right.schema)
        right = tables["right"].cast(self._right.schema)
        _, slot, ts = self._right.prepare(right, self._index, self._types)
        (code,) = pack([slot], [ts])
        order = np.argsort(code, kind="stable")
        self._held.set(
            right.take(pa.array(order, pa.int64())).combine_chunks(), slot[order], ts[order]
        )
        left = tables["left"].cast(self._left.schema)
        _, slot, ts = self._left.prepare(left, self._index, self._types)
        self._waiting.set(left, slot, ts)

    def state_size(self) -> tuple[int, int]:
        rows = len(self._waiting) + len(self._held)
        return rows, self._waiting.nbytes + self._held.nbytes + self._index.nbytes

    def describe(self) -> dict[str, Any]:
        return {
            "left_rows_held": len(self._waiting),
            "right_rows_held": len(self._held),
            "left_watermark": self.format_mark(self._lwm),
            "right_watermark": self.format_mark(self._rwm),
            "keys": self._index.n_slots,
        }
