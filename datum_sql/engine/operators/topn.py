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
``state_limit_rows``, ``key_number`` (``{"column", "key"}``: each changelog row also
carries the number of its ``key`` — the partition's slot, or with the rank in the key the
slot times the ranks shown plus the rank's place among them — for a result kept by it).
Output: the input columns minus ``drop``, then the rank (int64), then the key number, then
``_op`` for a changelog.

State: the held rows in a :class:`~datum_sql.engine.state.rows.RowStore`, each
partition's in rank order in a :class:`~datum_sql.engine.state.rows.SlotLists`, per row
its partition slot, arrival number and rank (numpy).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.arrays import one_array
from datum_sql.engine.changelog import OP_COLUMN, op_codes
from datum_sql.engine.eventtime import event_micros_masked
from datum_sql.engine.operators.aggregate import op_strings
from datum_sql.engine.operators.base import Operator, register
from datum_sql.engine.state.codec import decode_state, encode_state
from datum_sql.engine.state.keys import KeyIndex
from datum_sql.engine.state.retract import rows_to_remove
from datum_sql.engine.state.rows import RowStore, SlotLists
from datum_sql.errors import PlanError, QueryFailed
from datum_sql.types import END_OF_TIME, START_OF_TIME

_EMITS = ("changelog", "window_close")
_FUNCTIONS = ("row_number", "rank", "dense_rank")
_SLOT, _END, _RANK = "__topn_slot", "__topn_end", "__topn_rank"
_EMPTY = np.empty(0, np.int64)


def _plain(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array with dictionaries decoded (keys and sort keys by value)."""
    arr = one_array(col)
    return arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr


@register("top_n")
class TopN(Operator):
    """ROW_NUMBER() top-N per partition; a changelog, or final rows when windows close."""

    KIND = "top_n"
    STATE_VERSION = 2

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
        number = config.get("key_number") or {}
        self._key_number: str | None = number.get("column")
        #: the key numbered: (partition, rank) when the rank is in it, else the partition
        self._number_ranks = bool(self._rank_column) and self._rank_column in number.get("key", [])
        self._check_config(list(config.get("drop") or []))
        self._keep = [c for c in self._input.names if c not in set(config.get("drop") or [])]
        self._order_names = [o["column"] for o in self._order]
        types = [_plain_type(self._input.field(c).type) for c in self._partition]
        self._index = KeyIndex(types or [pa.int8()])
        self._reset_rows()
        self._end = _EMPTY  # per slot, window_close only
        self._wm = START_OF_TIME

    def _reset_rows(self) -> None:
        self._store = RowStore(self._input)
        self._lists = SlotLists(min(self._upper, 16))
        # per stored row: its rank (0: held unranked); the first store.n entries in use
        self._rank = _EMPTY

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
        want += [self._key_number] if self._key_number and self._emit == "changelog" else []
        want += [OP_COLUMN] if self._emit == "changelog" else []
        if self._schema.names != want:
            raise PlanError(f"{self.name}: output schema {self._schema.names} is not {want}")

    @property
    def closes_on_watermark(self) -> bool:
        return self._emit == "window_close"

    @property
    def output_schema(self) -> pa.Schema:
        return self._schema

    def _keys(self, table: pa.Table) -> list[pa.Array]:
        """The partition columns (one constant column for a single, global partition)."""
        if not self._partition:
            return [pa.array(np.zeros(table.num_rows, np.int8))]
        return [_plain(table.column(c)) for c in self._partition]

    def _new_slots(self, table: pa.Table, slots: np.ndarray, before: int) -> None:
        self._lists.grow(self._index.n_slots)
        if self._emit == "window_close" and self._index.n_slots > before:
            self._set_ends(table, slots, before)

    def _touched(self, *slots: np.ndarray) -> np.ndarray:
        """The distinct slots among ``slots``, increasing."""
        flag = np.zeros(self._index.n_slots, np.bool_)
        for s in slots:
            flag[s] = True
        return np.flatnonzero(flag)

    # -- batches ------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        if self._retracting:
            return self._on_changes(batch)
        table = pa.Table.from_batches([batch])
        slots, before = self._index.slots(self._keys(table))
        self._new_slots(table, slots, before)
        touched = self._touched(slots)
        held, held_slot = self._lists.gather(touched)
        m = len(held)
        c_slot = np.concatenate([held_slot, slots])
        keys = self._store.take(held, self._order_names)
        if m:
            keys = pa.concat_tables([keys, table.select(self._order_names)])
        else:
            keys = table.select(self._order_names)
        new_rank, order = self._ranks(keys, c_slot)
        out: list[pa.RecordBatch] = []
        if self._emit == "changelog":
            old_rank = np.concatenate([self._rank[held], np.zeros(n, np.int64)])
            change = self._changes(c_slot, old_rank, new_rank)
            if change is not None:
                pos, rank, ops, s = change
                out = [self._emit_rows(self._pick(pos, held, table), rank, ops, s)]
        # state: the ranked rows stay (the new ones are stored), in rank order
        fresh = np.flatnonzero(new_rank[m:] > 0)
        ids = np.concatenate([held, np.full(n, -1, np.int64)])
        if len(fresh):
            first = self._store.append(table.take(pa.array(fresh)))
            ids[m + fresh] = first + np.arange(len(fresh), dtype=np.int64)
            self._grow_rows()
        self._rank[ids[:m][new_rank[:m] > 0]] = new_rank[:m][new_rank[:m] > 0]
        self._rank[ids[m + fresh]] = new_rank[m + fresh]
        self._relist(touched, c_slot, order[new_rank[order] > 0], ids)
        self._check_limit()
        return out

    def _on_changes(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        """A changelog batch: its insertions join the held rows of their partitions, its
        retractions leave them; the touched partitions are ranked again."""
        ops = batch.column(OP_COLUMN)
        adds = op_codes(ops, self.name, "its input changelog", operator=self.name) % 2 == 0
        table = pa.Table.from_batches([batch]).drop_columns([OP_COLUMN])
        added, gone = table.filter(pa.array(adds)), table.filter(pa.array(~adds))
        a_slots, before = self._index.slots(self._keys(added))
        g_slots, _ = self._index.slots(self._keys(gone))
        self._new_slots(added, a_slots, before)
        n = added.num_rows
        touched = self._touched(a_slots, g_slots)
        held, held_slot = self._lists.gather(touched)
        m = len(held)
        cand = pa.concat_tables([self._store.take(held), added.select(self._input.names)])
        cand = cand.cast(self._input)
        c_slot = np.concatenate([held_slot, a_slots])
        removed = np.zeros(len(c_slot), np.bool_)
        if gone.num_rows:
            pick = rows_to_remove(
                [pa.array(c_slot), *(_plain(c) for c in cand.columns)],
                np.arange(m + n, dtype=np.int64),  # held rows in arrival order, then new
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
        order = stay
        if len(stay):
            ranks, by_rank = self._ranks(cand.take(pa.array(stay)).select(self._order_names),
                                         c_slot[stay])  # fmt: skip
            new_rank[stay] = ranks
            order = stay[by_rank]
        old_rank = np.concatenate([self._rank[held], np.zeros(n, np.int64)])
        out: list[pa.RecordBatch] = []
        change = self._changes(c_slot, old_rank, new_rank)
        if change is not None:
            pos, rank, codes, s = change
            out = [self._emit_rows(cand.take(pa.array(pos, pa.int64())), rank, codes, s)]
        # state: every row that was not retracted stays, ranked or not
        fresh = np.flatnonzero(~removed[m:])
        ids = np.concatenate([held, np.full(n, -1, np.int64)])
        if len(fresh):
            first = self._store.append(added.take(pa.array(fresh)))
            ids[m + fresh] = first + np.arange(len(fresh), dtype=np.int64)
            self._grow_rows()
        kept = ids[order]
        self._rank[kept] = new_rank[order]
        self._relist(touched, c_slot, order, ids)
        self._check_limit()
        return out

    def _relist(
        self, touched: np.ndarray, c_slot: np.ndarray, kept: np.ndarray, ids: np.ndarray
    ) -> None:
        """The touched partitions now hold the candidates ``kept`` (sorted by partition and
        rank); ``ids``: each candidate's stored row. The held rows not kept are dropped."""
        by_slot = c_slot[kept]
        counts = np.searchsorted(by_slot, touched, "right") - np.searchsorted(by_slot, touched)
        self._lists.write(touched, counts, ids[kept])
        self._maybe_compact()

    def _pick(self, pos: np.ndarray, held: np.ndarray, table: pa.Table) -> pa.Table:
        """The candidates ``pos`` as rows: held ones (below ``len(held)``) from the store,
        the others from the batch ``table``, in the order of ``pos``."""
        m = len(held)
        stored = pos < m
        if not stored.any():
            return table.take(pa.array(pos - m, pa.int64()))
        if stored.all():
            return self._store.take(held[pos])
        s, b = np.flatnonzero(stored), np.flatnonzero(~stored)
        both = pa.concat_tables(
            [self._store.take(held[pos[s]]), table.take(pa.array(pos[b] - m, pa.int64()))]
        )
        back = np.empty(len(pos), np.int64)
        back[s] = np.arange(len(s), dtype=np.int64)
        back[b] = len(s) + np.arange(len(b), dtype=np.int64)
        return both.take(pa.array(back))

    def _ranks(self, keys: pa.Table, slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each candidate's rank in its partition, 0 when above ``upper``; the candidates
        sorted by partition, ORDER BY keys and arrival). ``keys``: the ORDER BY columns.
        The candidates come in arrival order among equals — a partition's held rows first,
        in their order (which has its ties in arrival order), then the new rows — and the
        sort is stable, so ties stay in arrival order."""
        cols: dict[str, pa.Array] = {"__slot": pa.array(slot)}
        sort_keys: list[tuple[str, str]] = [("__slot", "ascending")]
        for i, o in enumerate(self._order):
            col = _plain(keys.column(o["column"]))
            way = "descending" if o["descending"] else "ascending"
            if col.null_count:
                cols[f"__n{i}"] = pc.is_null(col)
                sort_keys.append((f"__n{i}", "descending" if o["nulls_first"] else "ascending"))
            if pa.types.is_floating(col.type):  # SQL: NaN above every number
                cols[f"__nan{i}"] = pc.fill_null(pc.is_nan(col), False)
                sort_keys.append((f"__nan{i}", way))
            cols[f"__v{i}"] = col
            sort_keys.append((f"__v{i}", way))
        order = np.asarray(pc.sort_indices(pa.table(cols), sort_keys=sort_keys))
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
        return out, order

    def _changes(
        self, slot: np.ndarray, old_rank: np.ndarray, new_rank: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, pa.Array, np.ndarray] | None:
        """(candidate of each output row, its rank, its ``_op``, its partition slot),
        ordered by partition and rank; None when no visible row changed."""
        was = old_rank >= self._lower
        now = new_rank >= self._lower
        if self._rank_column:
            moved = old_rank != new_rank
            retract, insert = was & (~now | moved), now & (~was | moved)
        else:
            retract, insert = was & ~now, now & ~was
        r, i = np.flatnonzero(retract), np.flatnonzero(insert)
        if not len(r) and not len(i):
            return None
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
        return pos, rank, op_strings(codes.astype(np.int8)), s

    def _emit_rows(
        self, rows: pa.Table, rank: np.ndarray, ops: pa.Array | None, slot: np.ndarray | None = None
    ) -> pa.RecordBatch:
        taken = rows.select(self._keep)
        arrays = [c.combine_chunks() for c in taken.columns]
        if self._rank_column:
            arrays.append(pa.array(rank, pa.int64()))
        if self._key_number and ops is not None:
            assert slot is not None
            width = self._upper - self._lower + 1
            number = slot * width + (rank - self._lower) if self._number_ranks else slot
            arrays.append(pa.array(number, pa.int64()))
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
        ids, slots = self._lists.gather(np.flatnonzero(done))
        show = self._rank[ids] >= self._lower
        ids, slots = ids[show], slots[show]
        out = []
        if len(ids):
            # by window end, partition values and rank: an order that survives a restore
            keys = pa.table([k.take(pa.array(slots)) for k in self._index.key_columns()],
                            names=self._partition)  # fmt: skip
            keys = keys.append_column(_END, pa.array(self._end[slots]))
            keys = keys.append_column(_RANK, pa.array(self._rank[ids]))
            by = [(_END, "ascending"), *((c, "ascending") for c in self._partition)]
            order = np.asarray(pc.sort_indices(keys, sort_keys=[*by, (_RANK, "ascending")]))
            ids = ids[order]
            out = [self._emit_rows(self._store.take(ids), self._rank[ids], None)]
        keep = np.flatnonzero(~done)
        self._lists.write(np.flatnonzero(done), np.zeros(int(done.sum()), np.int64), _EMPTY)
        self._maybe_compact(force=True)  # only the rows of open partitions are left
        self._index.compact(keep)
        self._end = self._end[keep]
        self._lists.keep_slots(keep)
        return out

    # -- state --------------------------------------------------------------------------
    def _grow_rows(self) -> None:
        """Room in the per-row ranks for the rows just stored (set by the caller); the
        array grows by doubling."""
        if self._store.n > len(self._rank):
            grown = np.empty(max(self._store.n, 2 * len(self._rank), 1024), np.int64)
            grown[: len(self._rank)] = self._rank
            self._rank = grown

    def _maybe_compact(self, force: bool = False) -> None:
        """Drop the stored rows no partition holds any more, once they outnumber the held
        ones (or on ``force``, when some are dead)."""
        dead = self._store.n - self._lists.total
        if dead == 0 or not (force or dead > max(1 << 16, self._lists.total)):
            return
        ids, _ = self._lists.gather(np.arange(self._lists.n_slots))
        live = np.sort(ids)
        new_id = np.full(self._store.n, -1, np.int64)
        new_id[live] = np.arange(len(live), dtype=np.int64)
        self._store.keep(live)
        self._lists.renumber(new_id)
        self._rank = self._rank[live]

    def _check_limit(self) -> None:
        if self._limit is not None and self.state_size()[0] > self._limit:
            raise QueryFailed(
                f"operator {self.name!r} holds {self.state_size()[0]} rows, over its state limit "
                f"of {self._limit} (state_limit_rows); raise the limit, lower N or partition "
                "by fewer distinct keys",
                operator=self.name,
            )

    def snapshot(self) -> bytes | None:
        ids, slots = self._lists.gather(np.arange(self._lists.n_slots))
        rows = self._store.take(ids)
        rows = rows.append_column(_SLOT, pa.array(slots))
        rows = rows.append_column(_RANK, pa.array(self._rank[ids]))
        keys = pa.table({f"key{j}": c for j, c in enumerate(self._index.key_columns())})
        meta = {"watermark": self._wm, "n_slots": self._index.n_slots}
        return encode_state(self.KIND, self.STATE_VERSION, meta, {"rows": rows, "keys": keys})

    def restore(self, data: bytes) -> None:
        meta, tables = decode_state(data, self.KIND, self.STATE_VERSION)
        rows, keys = tables["rows"], tables["keys"]
        n_slots = int(meta["n_slots"])
        self._index = KeyIndex(self._index.types)
        self._index.load([one_array(c) for c in keys.columns], n_slots)
        self._end = _EMPTY
        if self._emit == "window_close" and n_slots:
            ends = pa.table(keys.columns, names=self._partition)
            self._set_ends(ends, np.arange(n_slots, dtype=np.int64), 0)
        self._reset_rows()
        slots = rows.column(_SLOT).to_numpy().astype(np.int64, copy=True)
        self._rank = rows.column(_RANK).to_numpy().astype(np.int64, copy=True)
        self._store.append(rows.drop_columns([_SLOT, _RANK]).cast(self._input))
        self._lists.load(slots, n_slots)
        self._wm = int(meta["watermark"])

    def state_size(self) -> tuple[int, int]:
        return self._lists.total, self._store.nbytes + self._lists.nbytes

    def describe(self) -> dict[str, Any]:
        return {"partitions": self._index.n_slots, "rows": self._lists.total}


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
