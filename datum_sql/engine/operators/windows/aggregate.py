"""Tumbling, hopping and cumulating window aggregation (kind ``window_aggregate``).

State: one slot per (window, group keys) — a
:class:`~datum_sql.engine.state.keys.KeyIndex` on ``[window number, *keys]`` (the number is
``start / slide`` for tumble and hop, ``end / step`` for cumulate, whose windows share
starts; numbers are dense, so the index looks them up by direct addressing) — holding the
partial of every aggregate, and the window bounds per slot.

On a batch: rows get their window (tumble) or pane (hop, cumulate, see
:mod:`.assign`), after the window offset is taken off their times; one Arrow hash group-by
gives a partial per distinct (window or pane, keys); hop and cumulate partials fan out to
their windows and are reduced per slot; the partials merge into the state. A tumble whose
last batch was mostly one group per row (a DISTINCT, a key per row) slots the rows
directly instead, its distinct slots being the batch's groups: the hash group-by would
find nearly as many groups as rows. With ``emit = "changelog"`` the changed (window, group) rows are emitted
right away (``+I`` new, ``-U``/``+U`` updated, nothing when unchanged).

On a watermark ``wm``: every window with ``end + allowed_lateness <= wm`` is complete —
with ``emit = "window_close"`` its final rows are emitted (ordered by window end, then
first appearance); in both modes its state is dropped. ``on_close`` flushes what is still
open (normally nothing: the runtime sends a +inf watermark first).

A ``window.kind`` of ``"session"`` builds a
:class:`~datum_sql.engine.operators.windows.session.SessionAggregate` instead (also
registered as ``session_aggregate``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.eventtime import event_micros_masked as event_micros
from datum_sql.engine.operators.aggregate import KeyedAggregate
from datum_sql.engine.operators.base import register
from datum_sql.engine.operators.windows import assign
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex, dense_unique, local_ids
from datum_sql.engine.state.slots import SlotColumn
from datum_sql.errors import PlanError
from datum_sql.types import END_OF_TIME, START_OF_TIME, format_micros

_EMITS = ("window_close", "changelog")
#: Past this many groups per row in a batch, the next batch slots its rows directly.
_ROWS_FIRST = 0.75


class WindowedAggregate(KeyedAggregate):
    """Config shared by the window operators (tumble, hop, session)."""

    CLOSES_ON_WATERMARK = True

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        window = dict(config["window"])
        self._kind: str = window["kind"]
        self._time_column: str = window["time_column"]
        config = dict(config)
        config.setdefault("order_column", self._time_column)
        if config["order_column"] is None:
            config["order_column"] = self._time_column
        super().__init__(name, config, inputs)
        self._size = int(window["size_us"])
        slide = window.get("slide_us")
        self._slide = int(slide) if slide else self._size
        if self._size <= 0 or self._slide <= 0:
            raise PlanError(f"{name}: window size and slide must be positive")
        self._emit: str = config.get("emit") or "window_close"
        if self._emit not in _EMITS:
            raise PlanError(f"{name}: emit must be one of {_EMITS}, got {self._emit!r}")
        self._changelog_mode = self._emit == "changelog"
        self._expect_columns(2, changelog=self._changelog_mode)
        self._lateness = int(config.get("allowed_lateness_us") or 0)
        self._wm = START_OF_TIME
        self._time_type = self._schema.field(0).type

    def _times(self, table: pa.Table) -> tuple[pa.Table, np.ndarray]:
        t, ok = event_micros(table.column(self._time_column))
        if not ok.all():  # rows without event time are late: the runtime removes them
            table = table.filter(pa.array(ok))
            t = t[ok]
        return table, t

    def _threshold(self, watermark: int) -> int:
        """Windows ending at or before this are complete (+ lateness) at ``watermark``."""
        if watermark >= END_OF_TIME:
            return END_OF_TIME
        return max(watermark - self._lateness, START_OF_TIME)

    # Both window kinds close what the watermark completes; ``_close`` is theirs.
    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        self._wm = max(self._wm, watermark)
        return self._close(self._threshold(watermark))

    def on_close(self) -> list[pa.RecordBatch]:
        return self._close(END_OF_TIME)

    def _close(self, threshold: int) -> list[pa.RecordBatch]:
        raise NotImplementedError

    def _time_array(self, micros: np.ndarray) -> pa.Array:
        tz = getattr(self._time_type, "tz", None)
        arr = pa.array(micros, pa.int64()).view(pa.timestamp("us", tz=tz))
        return arr if arr.type == self._time_type else arr.cast(self._time_type)

    @staticmethod
    def _iso(micros: int | None) -> str | None:
        # the one timestamp format of status() (types.format_micros), as for watermarks
        return None if micros is None else format_micros(int(micros))


@register("window_aggregate")
class WindowAggregate(WindowedAggregate):
    """GROUP BY window_start, window_end, keys over tumble(), hop() or cumulate()."""

    KIND = "window_aggregate"
    STATE_VERSION = 1

    def __new__(cls, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> Any:
        if cls is WindowAggregate and config["window"]["kind"] == "session":
            from datum_sql.engine.operators.windows.session import SessionAggregate

            return SessionAggregate(name, config, inputs)
        return super().__new__(cls)

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        if self._kind not in ("tumble", "hop", "cumulate"):
            raise PlanError(f"{name}: unknown window kind {self._kind!r}")
        if self._kind == "tumble":
            self._slide = self._size
        if self._kind == "cumulate" and self._size % self._slide:
            raise PlanError(f"{name}: a cumulate window's size must be a multiple of its step")
        self._offset = int(config["window"].get("offset_us") or 0)
        self._pane = {
            "tumble": self._size,
            "hop": assign.hop_pane(self._size, self._slide),
            "cumulate": self._slide,
        }[self._kind]
        self._index = KeyIndex([pa.int64(), *self._key_types])
        self._rows_first = False  # set from the last batch's groups per row
        # window bounds per slot, without the offset
        self._start = SlotColumn(pa.int64())
        self._end = SlotColumn(pa.int64())

    def _state_rows(self) -> int:
        return self._index.n_slots + self._aggs.extra_rows()

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        table, t = self._times(pa.Table.from_batches([batch]))
        n = table.num_rows
        if n == 0:
            return []
        # window number (tumble) or pane number (hop, cumulate): dense, so cheap to group on
        w = assign.pane_numbers(t, self._offset, self._pane)
        group = {"__w": pa.array(w, pa.int64()), **self._group_columns(table)}
        order_t = t if self._order_column == self._time_column else self._order_times(table)
        if self._rows_first and self._kind == "tumble" and self._aggs.fast:
            slots, before_n, number, parts = self._slot_rows(table, list(group.values()))
        else:
            keys, parts = self._aggs.batch_partials(table, group, order_t, self._seq)
            if self._kind != "tumble":
                keys, parts = self._fan_out(keys, parts)
                if not keys:
                    self._seq += n
                    return []
            slots, before_n = self._index.slots(keys)
            number = np.asarray(keys[0])
        self._seq += n
        # most rows their own group (a DISTINCT, a key per row): slot rows, not groups, next
        self._rows_first = len(slots) > _ROWS_FIRST * n
        n_slots = self._index.n_slots
        if n_slots > before_n:
            self._start.grow(n_slots)
            self._end.grow(n_slots)
            fresh = slots >= before_n
            start, end = self._bounds(number[fresh])
            for column, values in ((self._start, start), (self._end, end)):
                column.values[slots[fresh]] = values
                column.valid[slots[fresh]] = True
            self._aggs.grow(n_slots)
        if not self._changelog_mode:
            self._aggs.merge(slots, parts)
            self._check_limit()
            return []
        is_old = slots < before_n
        before = self._aggs.finals(slots[is_old]) if is_old.any() else []
        self._aggs.merge(slots, parts)
        self._check_limit()
        after = self._aggs.finals(slots)
        return self._changelog(self._lead(slots), is_old, before, after)

    def _slot_rows(
        self, table: pa.Table, group: list[pa.Array]
    ) -> tuple[np.ndarray, int, np.ndarray, list[Any]]:
        """Tumble, fast aggregates: the index slots every row and the batch's groups are
        its distinct slots (first appearance first, as a hash group-by numbers them, so
        slots are handed out alike) — no hash group-by over the key columns first.

        Returns (slot per group, slot count before, window number per group, partials)."""
        row_slots, before_n = self._index.slots(group)
        lo, hi = int(row_slots.min()), int(row_slots.max())
        if hi - lo <= 4 * len(row_slots) + 65536:
            slots, gid, first = dense_unique(row_slots - lo, hi - lo + 1)
            slots = slots + lo
        else:
            slots, first, gid = np.unique(row_slots, return_index=True, return_inverse=True)
            order = np.argsort(first)  # groups by first appearance, as dense_unique gives
            rank = np.empty(len(order), np.int64)
            rank[order] = np.arange(len(order), dtype=np.int64)
            slots, first, gid = slots[order], first[order], rank[gid.reshape(-1)]
        parts = [a.fast_partial(table, gid, len(slots)) for a in self._aggs.members]
        return slots, before_n, np.asarray(group[0])[first], parts

    def _bounds(self, number: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) without the offset of the windows numbered ``number``."""
        if self._kind == "cumulate":
            return assign.cumulate_start(number, self._slide, self._size), number * self._slide
        start = number * self._slide
        return start, start + self._size

    def _fan_out(self, keys: list[pa.Array], parts: list[Any]) -> tuple[list[pa.Array], Any]:
        """Hop, cumulate: pane partials → one reduced partial per distinct (window, keys)
        of the batch.

        Returns the index key columns (window number, keys...)."""
        pane = np.asarray(keys[0])
        if self._kind == "hop":
            idx, starts = assign.hop_expand(pane * self._pane, self._size, self._slide)
            window = starts // self._slide
        else:
            idx, window = assign.cumulate_expand(pane, self._slide, self._size)
        if len(idx) == 0:
            return [], parts
        key_ids, n_keys = (
            local_ids(keys[1:]) if len(keys) > 1 else (np.zeros(len(keys[0]), np.int64), 1)
        )
        w0 = int(window.min())
        width = (int(window.max()) - w0 + 1) * n_keys
        packed = (window - w0) * n_keys + key_ids[idx]
        if width <= 4 * len(packed) + 65536:
            _, inverse, first = dense_unique(packed, width)
        else:
            _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
            inverse = inverse.reshape(-1)
        parts = self._aggs.reduce(self._aggs.take(parts, idx), inverse, len(first))
        rows = pa.array(idx[first])
        return [pa.array(window[first], pa.int64()), *(k.take(rows) for k in keys[1:])], parts

    def _lead(self, slots: np.ndarray) -> list[pa.Array]:
        start = self._start.values[slots] + self._offset
        end = self._end.values[slots] + self._offset
        keys = self._index.keys(slots)[1:]
        return [self._time_array(start), self._time_array(end), *keys]

    def _close(self, threshold: int) -> list[pa.RecordBatch]:
        n = self._index.n_slots
        if n == 0:
            return []
        start, end = self._start.values[:n], self._end.values[:n]
        if threshold >= END_OF_TIME:
            done = np.ones(n, np.bool_)
        elif threshold - self._offset < START_OF_TIME:
            return []
        else:
            done = end <= threshold - self._offset
        if not done.any():
            return []
        closed = np.flatnonzero(done)
        out: list[pa.RecordBatch] = []
        if not self._changelog_mode:
            closed = closed[np.lexsort((start[closed], end[closed]))]
            values = self._aggs.finals(closed)
            out.append(self._batch([*self._lead(closed), *values], None))
        keep = np.flatnonzero(~done)
        remap = self._index.compact(keep)
        self._aggs.compact(keep, remap)
        self._start.compact(keep)
        self._end.compact(keep)
        return out

    # -- checkpoints and status -------------------------------------------------------
    def snapshot(self) -> bytes | None:
        cols = {f"key{j}": c for j, c in enumerate(self._index.key_columns())}
        cols.update(self._aggs.state_columns())
        meta = {
            "seq": self._seq,
            "n_slots": self._index.n_slots,
            "watermark": self._wm,
            # which path groups the next batch: it orders the batch's changelog rows
            "rows_first": self._rows_first,
        }
        tables = {"slots": pa.table(cols), **self._aggs.extra_tables()}
        return encode_state(self.KIND, self.STATE_VERSION, meta, tables)

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        slots = tables["slots"]
        n = int(meta["n_slots"])
        keys = [slots.column(f"key{j}").combine_chunks() for j in range(1 + len(self._key_types))]
        self._index.load(keys, n)
        start, end = self._bounds(np.asarray(keys[0]))
        self._start = SlotColumn(pa.int64())
        self._start.load(pa.array(start, pa.int64()))
        self._end = SlotColumn(pa.int64())
        self._end.load(pa.array(end, pa.int64()))
        self._aggs.load(slots, tables, n)
        self._seq = int(meta["seq"])
        self._rows_first = bool(meta.get("rows_first", False))
        self._wm = int(meta["watermark"])

    def state_size(self) -> tuple[int, int]:
        state_bytes = self._index.nbytes + self._aggs.nbytes
        return self._state_rows(), state_bytes + self._start.nbytes + self._end.nbytes

    def describe(self) -> dict[str, Any]:
        n = self._index.n_slots
        end = self._end.values[:n]
        oldest = int(end.min()) + self._offset if n else None
        return {
            "open_windows": len(np.unique(end)),
            "groups": n,
            "oldest_open_window_end": self._iso(oldest),
            "closes_at_watermark": None if oldest is None else self._iso(oldest + self._lateness),
        }
