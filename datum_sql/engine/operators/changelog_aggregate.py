"""Unbounded GROUP BY over a changelog (kind ``changelog_aggregate``): an aggregate of the
result of another unbounded aggregate, of a top-N, of anything that retracts rows.

State: :class:`~datum_sql.engine.operators.aggregate.GroupAggregate`'s (one slot per group,
each aggregate's partial), with retractable partials (see :mod:`.agg_retract`) and a row
count per group. On a batch: the rows an ``+I``/``+U`` carries are merged in, then those
a ``-U``/``-D`` carries are retracted (each retraction undoes its row's contribution:
the rows that are left aggregate as if the retracted one never came). Emitted per touched
group: ``+I`` when it gains its first row, ``-U``/``+U`` when its values change, ``-D``
(with its old values) when its last row leaves — the group disappears, as in batch SQL.
A global aggregate (no GROUP BY) keeps its one row: over no rows, ``count`` is 0 and the
others NULL. A retraction of a row the group does not hold fails the query. Groups gone
are dropped from state once they outnumber the live ones. On a watermark: nothing.
Snapshot: the group aggregate's, the row counts included.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.changelog import OP_COLUMN, op_codes
from datum_sql.engine.operators.aggregate import GroupAggregate, op_strings
from datum_sql.engine.operators.aggregates import AggregateSet
from datum_sql.engine.operators.base import register
from datum_sql.errors import PlanError, QueryFailed

_INS, _UPD_B, _UPD_A, _DEL = 0, 1, 2, 3


def _without_views(t: pa.DataType) -> pa.DataType:
    """``t`` with every string/binary view (at any depth) in its classic layout: Arrow
    cannot filter views."""
    if t == pa.string_view():
        return pa.string()
    if t == pa.binary_view():
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_without_views(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_field.with_type(_without_views(t.value_type))
        return pa.list_(inner) if pa.types.is_list(t) else pa.large_list(inner)
    return t


@register("changelog_aggregate")
class ChangelogAggregate(GroupAggregate):
    """Unbounded GROUP BY whose input is a changelog: retractions undo their rows."""

    KIND = "changelog_aggregate"
    RETRACTING = True
    #: Gone groups tolerated beyond the live ones before they are dropped from state.
    SLACK = 1 << 16

    def __init__(self, name: str, config: dict[str, Any], inputs: list[pa.Schema]) -> None:
        super().__init__(name, config, inputs)
        if inputs[0].get_field_index(OP_COLUMN) < 0:
            raise PlanError(f"{name}: the input of a changelog aggregate has no {OP_COLUMN}")
        self._global = not self._keys
        plain = pa.schema([f.with_type(_without_views(f.type)) for f in inputs[0]])
        self._plain = plain if plain != inputs[0] else None
        self._live = 0  # groups holding rows (a global aggregate's one group, once seen)

    def _signs(self, batch: pa.RecordBatch) -> np.ndarray:
        ops = batch.column(OP_COLUMN)
        codes = op_codes(ops, self.name, "its input changelog", operator=self.name)
        return codes % 2 == 0  # +I and +U add a row

    def _partials(self, table: pa.Table) -> tuple[np.ndarray, list]:
        """(slot of each group, partials) of ``table``'s rows; its rows get arrival numbers."""
        n = table.num_rows
        if n == 0:
            return np.empty(0, np.int64), []
        group = self._group_columns(table) or {"__g": pa.array(np.zeros(n, np.int8))}
        keys, parts = self._aggs.batch_partials(table, group, self._order_times(table), self._seq)
        self._seq += n
        slots, _ = self._index.slots(keys)
        return slots, parts

    def on_batch(self, batch: pa.RecordBatch, port: int = 0) -> list[pa.RecordBatch]:
        if batch.num_rows == 0:
            return []
        adds = self._signs(batch)
        table = pa.Table.from_batches([batch])
        if self._plain is not None:
            table = table.cast(self._plain)
        n_before = self._index.n_slots
        add_slots, add_parts = self._partials(table.filter(pa.array(adds)))
        ret_slots, ret_parts = self._partials(table.filter(pa.array(~adds)))
        self._aggs.grow(self._index.n_slots)
        touched = np.unique(np.concatenate([add_slots, ret_slots]))
        was = touched < n_before if self._global else self._aggs.rows(touched) > 0
        before = self._aggs.finals(touched[was]) if was.any() else []
        if len(add_slots):
            self._aggs.merge(add_slots, add_parts)
        if len(ret_slots):
            failed = self._aggs.retract(ret_slots, ret_parts)
            if failed is not None or (self._aggs.rows(ret_slots) < 0).any():
                what = f"{failed}() cannot take it back out" if failed else "it holds no such row"
                raise QueryFailed(
                    f"{self.name}: its input changelog retracted a row that a group cannot "
                    f"give back ({what}: a NaN or an infinity, or a row never inserted)",
                    operator=self.name,
                )
        live = np.ones(len(touched), np.bool_) if self._global else self._aggs.rows(touched) > 0
        self._aggs.reset(touched[~live])
        self._live += int((live & ~was).sum()) - int((was & ~live).sum())
        self._check_limit()
        after = self._aggs.finals(touched[live]) if live.any() else []
        out = self._emit(touched, was, live, before, after)
        self._drop_gone()
        return out

    def _emit(
        self,
        touched: np.ndarray,
        was: np.ndarray,
        live: np.ndarray,
        before: list[pa.Array],
        after: list[pa.Array],
    ) -> list[pa.RecordBatch]:
        """``-U``/``+U`` for changed groups, ``+I`` for new ones, ``-D`` for gone ones: one
        ``take`` per column from the old values followed by the new ones."""
        nb = int(was.sum())
        b_pos = np.cumsum(was) - 1  # where each touched group's old values are
        a_pos = np.cumsum(live) - 1 + nb  # and its new ones, past the old
        both = np.flatnonzero(was & live)
        if len(both) and self._aggs.aggs:
            old = [b.take(pa.array(b_pos[both])) for b in before]
            new = [a.take(pa.array(a_pos[both] - nb)) for a in after]
            upd = both[AggregateSet.changed(old, new)]
        else:
            upd = both[:0]
        ins, gone = np.flatnonzero(~was & live), np.flatnonzero(was & ~live)
        m = len(upd)
        if m + len(ins) + len(gone) == 0:
            return []
        rows = np.concatenate([np.repeat(upd, 2), ins, gone])
        value = np.concatenate([np.empty(2 * m, np.int64), a_pos[ins], b_pos[gone]])
        value[0 : 2 * m : 2] = b_pos[upd]
        value[1 : 2 * m : 2] = a_pos[upd]
        codes = np.concatenate(
            [np.tile(np.array([_UPD_B, _UPD_A], np.int8), m),
             np.full(len(ins), _INS, np.int8), np.full(len(gone), _DEL, np.int8)]
        )  # fmt: skip
        pool = after if not before else before if not after else [
            pa.concat_arrays([b, a]) for b, a in zip(before, after)
        ]  # fmt: skip
        vi = pa.array(value)
        lead = self._index.keys(touched[rows])
        return [self._batch([*lead, *(c.take(vi) for c in pool)], op_strings(codes))]

    def _drop_gone(self) -> None:
        """Forget the groups whose rows all left, once they outnumber the live ones."""
        n = self._index.n_slots
        if self._global or n - self._live <= self._live + self.SLACK:
            return
        keep = np.flatnonzero(self._aggs.rows(np.arange(n)) > 0)
        remap = self._index.compact(keep)
        self._aggs.compact(keep, remap)

    def on_close(self) -> list[pa.RecordBatch]:
        out = super().on_close()  # a global aggregate over no rows: its one row
        self._live = max(self._live, 1 if out else 0)
        return out

    def restore(self, data: bytes) -> None:
        super().restore(data)
        n = self._index.n_slots
        self._live = n if self._global else int((self._aggs.rows(np.arange(n)) > 0).sum())

    def describe(self) -> dict[str, Any]:
        return {"groups": self._live}
