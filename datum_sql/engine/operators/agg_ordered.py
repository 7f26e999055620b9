"""Order-sensitive aggregates: ``array_agg(x ORDER BY ...)``, ``string_agg(x, sep ORDER BY ...)``.

Arrival order is not the same across batch sizes, restarts or interleavings, so these
aggregates always carry their own order: the planner passes one struct column per call,
``{v: x, o0: key0, o1: key1, ...}`` (NULL for a row a ``FILTER`` skips), and per key the
params ``desc<j>`` and ``nulls_first<j>`` (1.0 or 0.0). Ties on every key keep arrival
order (the operator's arrival number, which a checkpoint carries).

State: every kept row, ``(slot, {v, o..., seq})``, unsorted. Partials are lists of such
rows per group, so merge appends, ``reduce`` concatenates and ``set`` replaces. ``final``
sorts the rows of the slots asked for by (slot, keys, seq) — NULL and NaN keys placed as
SQL places them (NaN above every number) — and builds one list per slot; a slot without
rows is NULL, as the aggregate over no rows is. The state grows with the input, like the
result does.

``array_agg`` keeps NULL values (as DuckDB and PostgreSQL do); ``string_agg`` skips them
and joins the rest, cast to text, with the separator (param ``separator``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.operators.aggregates import (
    Agg,
    Part,
    _arr,
    _idx,
    lists_from_parents,
    register_function,
    regroup_lists,
)
from datum_sql.errors import PlanError

SEQ = "__seq"


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with view types as their classic layout (Arrow cannot ``take`` views)."""
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    return t


class _RowStore:
    """The kept rows of every slot: ``slot`` (numpy) beside a struct array of rows."""

    def __init__(self, row_type: pa.DataType) -> None:
        self.type = row_type
        self.slot = np.empty(0, np.int64)
        self._chunks: list[pa.Array] = []
        self._rows: pa.Array | None = pa.array([], row_type)

    def rows(self) -> pa.Array:
        if self._rows is None:
            self._rows = pa.concat_arrays(self._chunks) if self._chunks else pa.array([], self.type)
            self._chunks = []
        return self._rows

    def add(self, slots: np.ndarray, rows: pa.Array) -> None:
        if len(rows) == 0:
            return
        self._chunks = [self.rows(), rows]
        self._rows = None
        self.slot = np.concatenate([self.slot, slots.astype(np.int64)])

    def keep(self, mask: np.ndarray, slot: np.ndarray) -> None:
        """Keep the rows of ``mask``, now in slots ``slot`` (one per kept row)."""
        self._rows = self.rows().filter(pa.array(mask))
        self.slot = slot

    def select(self, slots: np.ndarray, n_slots: int) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``slots``, row index) of every row of the distinct ``slots``."""
        pos_of = np.full(max(n_slots, 1), -1, np.int64)
        pos_of[slots] = np.arange(len(slots))
        pos = pos_of[self.slot] if len(self.slot) else np.empty(0, np.int64)
        sel = np.flatnonzero(pos >= 0)
        return pos[sel], sel

    @property
    def nbytes(self) -> int:
        return int(self.slot.nbytes + self.rows().nbytes)


def _sort_keys(rows: pa.Array, pos: np.ndarray, desc: list[bool], nulls_first: list[bool]):
    """The row order (pos, then each key as SQL orders it, then arrival) as a sort table."""
    cols: dict[str, Any] = {"pos": pa.array(pos, pa.int64())}
    keys: list[tuple[str, str]] = [("pos", "ascending")]
    for j, (d, nf) in enumerate(zip(desc, nulls_first)):
        key = rows.field(f"o{j}")
        direction = "descending" if d else "ascending"
        cols[f"n{j}"] = key.is_null()
        keys.append((f"n{j}", "descending" if nf else "ascending"))
        if pa.types.is_floating(key.type):  # NaN above every number
            cols[f"nan{j}"] = pc.fill_null(pc.is_nan(key), False)
            keys.append((f"nan{j}", direction))
        cols[f"k{j}"] = key
        keys.append((f"k{j}", direction))
    cols[SEQ] = rows.field(SEQ)
    keys.append((SEQ, "ascending"))
    return pa.table(cols), keys


@register_function
class ArrayAgg(Agg):
    func = "array_agg"
    #: Rows whose value is NULL are not kept (string_agg).
    skip_null_values = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        t = self.in_type
        if t is None or not pa.types.is_struct(t) or t.get_field_index("v") < 0:
            raise PlanError(
                f"{self.func}: its input must be the planner's {{v, o0, ...}} struct, got {t}"
            )
        self.n_keys = t.num_fields - 1
        self.desc = [bool(self.params.get(f"desc{j}", 0.0)) for j in range(self.n_keys)]
        self.nulls_first = [
            bool(self.params.get(f"nulls_first{j}", 0.0)) for j in range(self.n_keys)
        ]
        fields = [t.field(i).with_type(_plain_type(t.field(i).type)) for i in range(t.num_fields)]
        self.plain_type = pa.struct(fields)
        self.row_type = pa.struct([*fields, pa.field(SEQ, pa.int64())])
        self.store = _RowStore(self.row_type)
        self.n_slots = 0
        self._pending: tuple[pa.Array, int] | None = None

    # -- the batch partial: lists of arrival numbers, then the rows they name ------------
    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        assert self.input is not None
        column = _arr(batch.column(self.input))
        if column.type != self.plain_type:
            column = column.cast(self.plain_type)
        self._pending = (column, int(seq[0].as_py()) if len(seq) else 0)
        return {self.alias: seq}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [(self.alias, "list")]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        assert self._pending is not None
        column, seq0 = self._pending
        self._pending = None
        lists = _arr(outs[0])
        seq = np.asarray(_arr(pc.list_flatten(lists)))
        parents = np.asarray(pc.list_parent_indices(lists))
        rows = column.take(_idx(seq - seq0))
        keep = np.asarray(rows.is_valid())
        if self.skip_null_values:
            keep &= np.asarray(rows.field("v").is_valid())
        fields = [rows.field(i) for i in range(rows.type.num_fields)]
        full = pa.StructArray.from_arrays(
            [*fields, pa.array(seq, pa.int64())], fields=list(self.row_type)
        )
        if not keep.all():
            full, parents = full.filter(pa.array(keep)), parents[keep]
        return [lists_from_parents(full, parents, len(lists))]

    # -- partial algebra and state ----------------------------------------------------
    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        return [regroup_lists(part[0], gid, n_groups)]

    def grow(self, n: int) -> None:
        self.n_slots = max(self.n_slots, n)

    def compact(self, keep: np.ndarray, remap: np.ndarray) -> None:
        new = remap[self.store.slot] if len(self.store.slot) else np.empty(0, np.int64)
        live = new >= 0
        self.store.keep(live, new[live])
        self.n_slots = len(keep)

    def _lists(self, slots: np.ndarray, sort: bool) -> pa.Array:
        """One list of kept rows per slot (sorted by the ORDER BY when ``sort``)."""
        pos, sel = self.store.select(slots, self.n_slots)
        rows = self.store.rows().take(_idx(sel))
        if sort and len(sel):
            table, keys = _sort_keys(rows, pos, self.desc, self.nulls_first)
            order = pc.sort_indices(table, sort_keys=keys)
        else:
            order = pa.array(np.argsort(pos, kind="stable"), pa.int64())
        return lists_from_parents(rows.take(order), np.sort(pos), len(slots))

    def gather(self, slots: np.ndarray) -> Part:
        return [self._lists(slots, sort=False)]

    def set(self, slots: np.ndarray, part: Part) -> None:
        mark = np.zeros(max(self.n_slots, 1), np.bool_)
        mark[slots] = True
        keep = ~mark[self.store.slot] if len(self.store.slot) else np.empty(0, np.bool_)
        self.store.keep(keep, self.store.slot[keep])
        self.merge(slots, part)

    def merge(self, slots: np.ndarray, part: Part) -> None:
        lists = part[0]
        parents = np.asarray(pc.list_parent_indices(lists))
        self.store.add(slots[parents], _arr(pc.list_flatten(lists)))

    def final(self, slots: np.ndarray) -> pa.Array:
        lists = self._lists(slots, sort=True)
        values = _arr(pc.list_flatten(lists)).field("v")
        empty = pa.array(np.asarray(pc.list_value_length(lists)) == 0)
        return pa.ListArray.from_arrays(lists.offsets, values, mask=empty)

    # -- snapshot ---------------------------------------------------------------------
    def state_arrays(self) -> list[pa.Array]:
        return []

    def extra_tables(self) -> dict[str, pa.Table]:
        return {
            f"rows{self.idx}": pa.table(
                {"slot": pa.array(self.store.slot, pa.int64()), "row": self.store.rows()}
            )
        }

    def load(self, arrays: list[pa.Array], tables: dict[str, pa.Table], n_slots: int) -> None:
        table = tables[f"rows{self.idx}"]
        self.store = _RowStore(self.row_type)
        self.store.add(np.asarray(table.column("slot")), _arr(table.column("row")))
        self.n_slots = n_slots

    def extra_rows(self) -> int:
        return len(self.store.slot)

    @property
    def nbytes(self) -> int:
        return self.store.nbytes


@register_function
class StringAgg(ArrayAgg):
    func = "string_agg"
    skip_null_values = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        sep = self.params.get("separator")
        if not isinstance(sep, str):
            raise PlanError(f"{self.func}: the separator must be a text literal, got {sep!r}")
        self.separator = sep

    def final(self, slots: np.ndarray) -> pa.Array:
        lists = super().final(slots)
        text = pa.ListArray.from_arrays(
            lists.offsets,
            _arr(pc.list_flatten(lists)).cast(pa.large_string()),
            mask=lists.is_null(),
        )
        return pc.binary_join(text, pa.scalar(self.separator, pa.large_string()))
