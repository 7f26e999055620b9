"""Top-N per partition (kind ``top_n``): ``ROW_NUMBER() OVER (PARTITION BY p ORDER BY o)``
(or ``RANK()``, ``DENSE_RANK()``: config ``function``) kept where ``lower <= rn <= upper``,
over an append-only input.

State: the rows that rank at most ``upper`` in their partition, with their rank. The input
is append-only, so ranks only grow and a row ranked below ``upper`` can never come back:
each partition holds at most ``upper`` rows for ROW_NUMBER (more only with ties under
RANK/DENSE_RANK). ROW_NUMBER's ties in ``ORDER BY`` go to the row that arrived first (a
per-row arrival number breaks them), so the result does not depend on batch sizes.

On a batch: the held rows of the partitions the batch touches and the batch's rows are
sorted together by (partition, ORDER BY keys, arrival) — one Arrow ``sort_indices`` — and
ranked; the first ``upper`` of each partition stay.

- ``emit = "changelog"`` (unbounded): the difference between each touched partition's old
  and new visible rows (rank in ``[lower, upper]``) is emitted right away, ordered by
  partition and rank: ``-U`` old then ``+U`` new where a rank changed hands, ``-D`` for a
  row that left, ``+I`` for a row that entered. With ``rank_column`` set the rank is a
  column of the output, so a row whose rank changed is retracted at its old rank and
  inserted at its new one. Ranks only grow, which makes the last op per rank and per row
  the final one, as the DuckDB upsert sink needs.
- Over a changelog (the input has ``_op``; ``emit = "changelog"`` only): the state holds
  every live row of the input, ranked or not, since a retraction in the top N lets the
  next row in. A retraction removes the held row equal to it in every column (the
  earliest among equals; none: the query fails); the touched partitions are re-ranked and
  their visible rows diffed as above.
- ``emit = "window_close"`` (window top-N): the partitions include the window bounds; on a
  watermark ``wm`` every partition whose ``window_end`` column is at most ``wm`` minus
  ``allowed_lateness_us`` is final: its rows are emitted (append-only, by window end,
  partition values, rank) and dropped from state.

Config: ``partition`` (columns), ``order`` (``{"column", "descending", "nulls_first"}``),
``lower``, ``upper``, ``rank_column`` (None: no rank in the output), ``drop`` (input columns
not in the output), ``emit``, ``window_end`` (window_close), ``allowed_lateness_us``,
``state_limit_rows``. Output: the input columns minus ``drop``, then the rank (int64), then
``_op`` for a changelog.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.arrays import one_array
from datum_sql.engine.changelog import DELETE, INSERT, OP_COLUMN, UPDATE_AFTER, UPDATE_BEFORE
from datum_sql.engine.eventtime import event_micros_masked
from datum_sql.engine.operators.aggregate import op_strings
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.engine.state.retract import rows_to_remove
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME, START_OF_TIME

_EMITS = ("changelog", "window_close")
_FUNCTIONS = ("row_number", "rank", "dense_rank")
_SEQ, _RANK = "__topn_seq", "__topn_rank"
_EMPTY = np.empty(0, np.int64)
_ADDS = pa.array([INSERT, UPDATE_AFTER])
_ALL_OPS = pa.array([INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE])


def _plain(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array with dictionaries decoded (keys and sort keys by value)."""
    arr = one_array(col)
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


@register("top_n")
class TopN(Operator):
    """ROW_NUMBER() top-N per partition; a changelog, or final rows when windows close."""

    KIND = "top_n"
    STATE_VERSION = 1

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        self._schema: pa.Schema = config["schema"]
        #: The input is a changelog: its rows are the input's columns but ``_op``.
        self._retracting = OP_COLUMN in inputs[0].names
        self._input = inputs[0]
        if self._retracting:
            self._input = inputs[0].remove(inputs[0].get_field_index(OP_COLUMN))
        self._partition: list[str] = list(config.get("partition") or [])
        self._order: list[dict[str, Any]] = list(config.get("order") or [])
        self._lower = int(config.get("lower", 1))
        self._upper = int(config["upper"])
        self._rank_column: str | None = config.get("rank_column")
        self._function: str = config.get("function") or "row_number"
        self._emit: str = config.get("emit") or "changelog"
        self._end_column: str | None = config.get("window_end")
        self._lateness = int(config.get("allowed_lateness_us") or 0)
        limit = config.get("state_limit_rows")
        self._limit: int | None = None if limit is None else int(limit)
        self._check_config(list(config.get("drop") or []))
        self._keep = [c for c in self._input.names if c not in set(config.get("drop") or [])]
        types = [_plain_type(self._input.field(c).type) for c in self._partition]
        self._index = KeyIndex(types or [pa.int8()])
        self._rows = self._input.empty_table()
        self._slot, self._seq, self._rank = _EMPTY, _EMPTY, _EMPTY
        self._alive = np.empty(0, np.bool_)
        self._end = _EMPTY  # per slot, window_close only
        self._next_seq = 0
        self._wm = START_OF_TIME

    def _check_config(self, drop: list[str]) -> None:
        names = set(self._input.names)
        for c in [*self._partition, *(o["column"] for o in self._order), *drop]:
            if c not in names:
                raise PlanError(f"{self.name}: column {c!r} is not an input column")
        if self._function not in _FUNCTIONS:
            raise PlanError(f"{self.name}: function must be one of {_FUNCTIONS}")
        if self._emit not in _EMITS:
            raise PlanError(f"{self.name}: emit must be one of {_EMITS}, got {self._emit!r}")
        if not 1 <= self._lower <= self._upper:
            raise PlanError(
                f"{self.name}: need 1 <= lower <= upper, got {self._lower}..{self._upper}"
            )
        if self._retracting and self._emit != "changelog":
            raise PlanError(f"{self.name}: a window top-N reads append-only rows, not a changelog")
        if self._emit == "window_close" and self._end_column not in self._partition:
            raise PlanError(f"{self.name}: window_close needs a window_end partition column")
        want = [c for c in self._input.names if c not in set(drop)]
        want += [self._rank_column] if self._rank_column else []
        want += [OP_COLUMN] if self._emit == "changelog" else []
        if self._schema.names != want:
            raise PlanError(f"{self.name}: output schema {self._schema.names} is not {want}")

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def _keys(self, table: pa.Table) -> list[pa.Array]:
        """The partition columns (one constant column for a single, global partition)."""
        if not self._partition:
            return [pa.array(np.zeros(table.num_rows, np.int8))]
        return [_plain(table.column(c)) for c in self._partition]

    # -- batches ------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        if self._retracting:
            return self._on_changes(batch)
        table = pa.Table.from_batches([batch])
        slots, before = self._index.slots(self._keys(table))
        if self._emit == "window_close" and self._index.n_slots > before:
            self._set_ends(table, slots, before)
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        flag = np.zeros(self._index.n_slots, np.bool_)
        flag[slots] = True
        old = np.flatnonzero(self._alive & flag[self._slot]) if len(self._slot) else _EMPTY
        cand = pa.concat_tables([self._rows.take(pa.array(old)), table]) if len(old) else table
        c_slot = np.concatenate([self._slot[old], slots])
        c_seq = np.concatenate([self._seq[old], seq])
        old_rank = np.concatenate([self._rank[old], np.zeros(n, np.int64)])
        new_rank = self._ranks(cand, c_slot, c_seq)
        out = self._changes(cand, c_slot, old_rank, new_rank) if self._emit == "changelog" else []
        # state: held rows keep their new rank or die; new rows that rank are appended
        m = len(old)
        kept_old = new_rank[:m] > 0
        self._rank[old[kept_old]] = new_rank[:m][kept_old]
        self._alive[old[~kept_old]] = False
        fresh = np.flatnonzero(new_rank[m:] > 0)
        if len(fresh):
            self._append(table.take(pa.array(fresh)), slots[fresh], seq[fresh], new_rank[m:][fresh])
        self._maybe_compact()
        self._check_limit()
        return out

    def _on_changes(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """A changelog batch: its insertions join the held rows of their partitions, its
        retractions leave them; the touched partitions are ranked again."""
        ops = batch.column(OP_COLUMN)
        valid = pc.fill_null(pc.is_in(ops, _ALL_OPS), False)
        if not pc.all(valid).as_py():
            bad = ops.filter(pc.invert(valid))[0].as_py()
            raise QueryFailed(
                f"{self.name}: invalid {OP_COLUMN} value {bad!r} in its input changelog; "
                "expected one of +I, -U, +U, -D",
                operator=self.name,
            )
        adds = np.asarray(pc.is_in(ops, _ADDS))
        table = pa.Table.from_batches([batch]).drop_columns([OP_COLUMN])
        added, gone = table.filter(pa.array(adds)), table.filter(pa.array(~adds))
        a_slots, _ = self._index.slots(self._keys(added))
        g_slots, _ = self._index.slots(self._keys(gone))
        n = added.num_rows
        seq = np.arange(self._next_seq, self._next_seq + n, dtype=np.int64)
        self._next_seq += n
        flag = np.zeros(self._index.n_slots, np.bool_)
        flag[a_slots] = True
        flag[g_slots] = True
        old = np.flatnonzero(self._alive & flag[self._slot]) if len(self._slot) else _EMPTY
        cand = pa.concat_tables([self._rows.take(pa.array(old)), added]) if len(old) else added
        c_slot = np.concatenate([self._slot[old], a_slots])
        c_seq = np.concatenate([self._seq[old], seq])
        removed = np.zeros(len(c_slot), np.bool_)
        if gone.num_rows:
            pick = rows_to_remove(
                [pa.array(c_slot), *(_plain(c) for c in cand.columns)],
                c_seq,
                [pa.array(g_slots), *(_plain(c) for c in gone.columns)],
            )
            if pick is None:
                raise QueryFailed(
                    f"{self.name}: its input changelog retracted a row it does not hold (a "
                    "row never inserted)",
                    operator=self.name,
                )
            removed[pick] = True
        stay = np.flatnonzero(~removed)
        new_rank = np.zeros(len(c_slot), np.int64)
        if len(stay):
            new_rank[stay] = self._ranks(cand.take(pa.array(stay)), c_slot[stay], c_seq[stay])
        old_rank = np.concatenate([self._rank[old], np.zeros(n, np.int64)])
        out = self._changes(cand, c_slot, old_rank, new_rank)
        # state: every row that was not retracted stays, ranked or not
        m = len(old)
        self._rank[old] = new_rank[:m]
        self._alive[old[removed[:m]]] = False
        fresh = np.flatnonzero(~removed[m:])
        if len(fresh):
            self._append(
                added.take(pa.array(fresh)), a_slots[fresh], seq[fresh], new_rank[m:][fresh]
            )
        self._maybe_compact()
        self._check_limit()
        return out

    def _ranks(self, cand: pa.Table, slot: np.ndarray, seq: np.ndarray) -> np.ndarray:
        """Each candidate's row number in its partition, or 0 when above ``upper``."""
        cols: dict[str, pa.Array] = {"__slot": pa.array(slot)}
        keys: list[tuple[str, str]] = [("__slot", "ascending")]
        for i, o in enumerate(self._order):
            col = _plain(cand.column(o["column"]))
            way = "descending" if o["descending"] else "ascending"
            if col.null_count:
                cols[f"__n{i}"] = pc.is_null(col)
                keys.append((f"__n{i}", "descending" if o["nulls_first"] else "ascending"))
            if pa.types.is_floating(col.type):  # SQL: NaN above every number
                cols[f"__nan{i}"] = pc.fill_null(pc.is_nan(col), False)
                keys.append((f"__nan{i}", way))
            cols[f"__v{i}"] = col
            keys.append((f"__v{i}", way))
        cols["__seq"] = pa.array(seq)
        keys.append(("__seq", "ascending"))
        order = np.asarray(pc.sort_indices(pa.table(cols), sort_keys=keys))
        s = slot[order]
        idx = np.arange(len(s), dtype=np.int64)
        starts = np.ones(len(s), np.bool_)
        starts[1:] = s[1:] != s[:-1]
        first = np.maximum.accumulate(np.where(starts, idx, 0))  # of the partition
        if self._function == "row_number":
            rank = idx - first + 1
        else:  # a new value starts where any ORDER BY key differs from the row before
            taken = pa.array(order)
            new = starts.copy()
            for i in range(len(self._order)):
                new |= ~_same_as_previous(cols[f"__v{i}"].take(taken))
            if self._function == "rank":
                rank = np.maximum.accumulate(np.where(new, idx, 0)) - first + 1
            else:
                count: np.ndarray = np.cumsum(new)
                rank = count - count[first] + 1
        out = np.zeros(len(s), np.int64)
        top = rank <= self._upper
        out[order[top]] = rank[top]
        return out

    def _changes(
        self, cand: pa.Table, slot: np.ndarray, old_rank: np.ndarray, new_rank: np.ndarray
    ) -> list[pa.RecordBatch]:
        was = old_rank >= self._lower
        now = new_rank >= self._lower
        if self._rank_column:
            moved = old_rank != new_rank
            retract, insert = was & (~now | moved), now & (~was | moved)
        else:
            retract, insert = was & ~now, now & ~was
        r, i = np.flatnonzero(retract), np.flatnonzero(insert)
        if not len(r) and not len(i):
            return []
        pos = np.concatenate([r, i])
        rank = np.concatenate([old_rank[r], new_rank[i]])
        kind = np.concatenate([np.zeros(len(r), np.int8), np.ones(len(i), np.int8)])
        s = slot[pos]
        order = np.lexsort((kind, rank, s))
        pos, rank, kind, s = pos[order], rank[order], kind[order], s[order]
        same = (s[1:] == s[:-1]) & (rank[1:] == rank[:-1])  # a retraction then an insertion
        paired_next = np.zeros(len(pos), np.bool_)
        paired_prev = np.zeros(len(pos), np.bool_)
        paired_next[:-1] = same
        paired_prev[1:] = same
        # codes: 0 +I, 1 -U, 2 +U, 3 -D
        codes = np.where(kind == 0, np.where(paired_next, 1, 3), np.where(paired_prev, 2, 0))
        return [self._emit_rows(cand, pos, rank, op_strings(codes.astype(np.int8)))]

    def _emit_rows(
        self, rows: pa.Table, pos: np.ndarray, rank: np.ndarray, ops: pa.Array | None
    ) -> pa.RecordBatch:
        taken = rows.select(self._keep).take(pa.array(pos, pa.int64()))
        arrays = [c.combine_chunks() for c in taken.columns]
        if self._rank_column:
            arrays.append(pa.array(rank, pa.int64()))
        if ops is not None:
            arrays.append(ops)
        out = [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, self._schema)]
        return pa.RecordBatch.from_arrays(out, schema=self._schema)

    # -- windows ------------------------------------------------------------------------
    def _set_ends(self, table: pa.Table, slots: np.ndarray, before: int) -> None:
        assert self._end_column is not None
        ends, ok = event_micros_masked(table.column(self._end_column))
        grown = np.full(self._index.n_slots, END_OF_TIME, np.int64)
        grown[: len(self._end)] = self._end
        fresh = slots >= before
        grown[slots[fresh]] = np.where(ok[fresh], ends[fresh], END_OF_TIME)
        self._end = grown

    def on_watermark(self, watermark: int, port: int = 0) -> list[pa.RecordBatch]:
        self._wm = max(self._wm, watermark)
        if self._emit != "window_close":
            return []
        if watermark >= END_OF_TIME:
            return self._close(END_OF_TIME)
        return self._close(max(watermark - self._lateness, START_OF_TIME))

    def on_close(self) -> list[pa.RecordBatch]:
        return self._close(END_OF_TIME) if self._emit == "window_close" else []

    def _close(self, threshold: int) -> list[pa.RecordBatch]:
        n = self._index.n_slots
        if n == 0:
            return []
        done = self._end[:n] <= threshold if threshold < END_OF_TIME else np.ones(n, np.bool_)
        if not done.any():
            return []
        closing = self._alive & done[self._slot]
        show = np.flatnonzero(closing & (self._rank >= self._lower))
        # by window end, partition values and rank: an order that survives a restore
        keys = self._rows.select(self._partition).take(pa.array(show))
        keys = keys.append_column(_SEQ, pa.array(self._end[self._slot[show]]))
        keys = keys.append_column(_RANK, pa.array(self._rank[show]))
        by = [(_SEQ, "ascending"), *((c, "ascending") for c in self._partition)]
        show = show[np.asarray(pc.sort_indices(keys, sort_keys=[*by, (_RANK, "ascending")]))]
        out = [self._emit_rows(self._rows, show, self._rank[show], None)] if len(show) else []
        self._alive &= ~closing
        keep = np.flatnonzero(~done)
        remap = self._index.compact(keep)
        self._end = self._end[keep]
        live = np.flatnonzero(self._alive)
        self._set_rows(self._rows.take(pa.array(live)), remap[self._slot[live]],
                       self._seq[live], self._rank[live])  # fmt: skip
        return out

    # -- state --------------------------------------------------------------------------
    def _append(self, rows: pa.Table, slot: np.ndarray, seq: np.ndarray, rank: np.ndarray) -> None:
        merged = pa.concat_tables([self._rows, rows.select(self._input.names)])
        if merged.num_rows and len(merged.column(0).chunks) > 16:
            merged = merged.combine_chunks()
        self._rows = merged
        self._slot = np.concatenate([self._slot, slot])
        self._seq = np.concatenate([self._seq, seq])
        self._rank = np.concatenate([self._rank, rank])
        self._alive = np.concatenate([self._alive, np.ones(len(slot), np.bool_)])

    def _set_rows(
        self, rows: pa.Table, slot: np.ndarray, seq: np.ndarray, rank: np.ndarray
    ) -> None:
        self._rows = rows.combine_chunks()
        self._slot, self._seq, self._rank = slot, seq, rank
        self._alive = np.ones(len(slot), np.bool_)

    def _maybe_compact(self) -> None:
        dead = len(self._alive) - int(self._alive.sum())
        if dead > max(1024, len(self._alive) // 2):
            live = np.flatnonzero(self._alive)
            self._set_rows(self._rows.take(pa.array(live)), self._slot[live],
                           self._seq[live], self._rank[live])  # fmt: skip

    def _check_limit(self) -> None:
        if self._limit is not None and self.state_size()[0] > self._limit:
            raise QueryFailed(
                f"operator {self.name!r} holds {self.state_size()[0]} rows, over its state limit "
                f"of {self._limit} (state_limit_rows); raise the limit, lower N or partition "
                "by fewer distinct keys",
                operator=self.name,
            )

    def snapshot(self) -> bytes | None:
        live = np.flatnonzero(self._alive)
        rows = self._rows.take(pa.array(live))
        rows = rows.append_column(_SEQ, pa.array(self._seq[live])).append_column(
            _RANK, pa.array(self._rank[live])
        )
        meta = {"next_seq": self._next_seq, "watermark": self._wm}
        return encode_state(self.KIND, self.STATE_VERSION, meta, {"rows": rows})

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        rows = tables["rows"]
        seq = rows.column(_SEQ).to_numpy().astype(np.int64, copy=True)
        rank = rows.column(_RANK).to_numpy().astype(np.int64, copy=True)
        rows = rows.drop_columns([_SEQ, _RANK])
        self._index = KeyIndex(self._index.types)
        self._end = _EMPTY
        slots, _ = self._index.slots(self._keys(rows)) if rows.num_rows else (_EMPTY, 0)
        if self._emit == "window_close" and self._index.n_slots:
            self._set_ends(rows, slots, 0)
        self._set_rows(rows.cast(self._input), slots, seq, rank)
        self._next_seq = int(meta["next_seq"])
        self._wm = int(meta["watermark"])

    def state_size(self) -> tuple[int, int]:
        return int(self._alive.sum()), int(self._rows.nbytes)

    def describe(self) -> dict[str, Any]:
        return {"partitions": self._index.n_slots, "rows": int(self._alive.sum())}


def _same_as_previous(col: pa.Array) -> np.ndarray:
    """Per row: equal to the row before it, as ORDER BY sees it (NULL = NULL, NaN = NaN)."""
    out = np.zeros(len(col), np.bool_)
    if len(col) < 2:
        return out
    a, b = col.slice(1), col.slice(0, len(col) - 1)
    same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
    if pa.types.is_floating(col.type):
        nan = pc.and_(pc.fill_null(pc.is_nan(a), False), pc.fill_null(pc.is_nan(b), False))
        same = pc.or_(same, nan)
    out[1:] = np.asarray(same)
    return out


def _plain_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t
