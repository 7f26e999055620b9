"""Aggregate Python functions (``ctx.register_udaf``) as mergeable partial states.

The call's input is one struct column whose fields are the function's arguments (the
planner packs them; a row whose struct is NULL was filtered out by ``FILTER (WHERE ...)``
and is skipped). A batch's rows are grouped by one stable sort of their group ids, and the
function's ``accumulate`` runs once per group over zero-copy slices of the sorted
arguments (see :meth:`~datum_sql.engine.udafs.AggregateUdf.accumulate`).

- :class:`PythonAggregate`: the partial of a batch's group is the declared state after
  accumulating the group's rows into the initial state, plus a ``has`` flag (the group
  had rows). Merging into a slot that holds no rows yet takes the partial as it is; any
  other merge (a slot's earlier rows, hop windows' panes, sessions joining) calls the
  function's ``merge``. The state columns (and ``has``) are the snapshot.
- :class:`PythonAggregateRetract`, over a changelog: the partial is the group's rows
  themselves (a list of argument structs), accumulated into the slot's state on merge and
  taken back out by the function's ``retract``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine import udafs
from datum_sql.engine.operators.aggregates import (
    Agg,
    Part,
    _arr,
    group_sizes,
    lists_from_parents,
    register_function,
    register_retracting,
)
from datum_sql.engine.state.slots import SlotColumn
from datum_sql.engine.udafs import scatter
from datum_sql.engine.udfs import UdfFailure
from datum_sql.errors import CheckpointError, PlanError, QueryFailed


def _group_offsets(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


@register_function
class PythonAggregate(Agg):
    """``params["function"]``: the registered aggregate function this call runs."""

    func = "python"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        name = str(self.params.get("function"))
        udaf = udafs.registered().get(name)
        if udaf is None:
            raise PlanError(
                f"aggregate function {name}() is not registered in this process; register it "
                "(ctx.register_udaf or CREATE AGGREGATE FUNCTION) before running the query"
            )
        self.udaf = udaf
        self.state_cols = [SlotColumn(f.type, v) for f, v in zip(udaf.state, udaf.initial)]
        self.cols = [*self.state_cols, *self._extra_columns()]
        self.fast = True
        self._args: pa.Array | None = None

    def _extra_columns(self) -> list[SlotColumn]:
        return [SlotColumn(pa.bool_(), False)]  # has: the slot holds rows

    def _failing(self, step: Any) -> Any:
        """``step()``; the function's failure fails the query naming it and the operator."""
        try:
            return step()
        except UdfFailure as failure:
            raise QueryFailed(f"aggregate {failure}", operator=self.operator) from failure

    # -- the batch partial ------------------------------------------------------------
    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        assert self.input is not None
        self._args = _arr(batch.column(self.input))
        return {self.alias: pa.array(np.arange(batch.num_rows, dtype=np.int64))}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [(self.alias, "list")]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        lists = _arr(outs[0])
        rows = np.asarray(_arr(pc.list_flatten(lists)))
        sizes = np.asarray(pc.list_value_length(lists).fill_null(0))
        return self._partial(rows, sizes)

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        assert self.input is not None
        self._args = _arr(batch.column(self.input))
        return self._partial(np.argsort(gid, kind="stable"), group_sizes(gid, n_groups, sizes))

    def _rows(self, order: np.ndarray, sizes: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        """The argument structs of the batch's rows in group order, without the rows
        FILTER left out, and the row count of each group."""
        assert self._args is not None
        rows = self._args.take(pa.array(order, pa.int64()))
        self._args = None
        if rows.null_count:
            keep = np.asarray(rows.is_valid())
            group = np.repeat(np.arange(len(sizes)), sizes)
            sizes = np.bincount(group[keep], minlength=len(sizes))
            rows = rows.filter(pa.array(keep))
        return rows, sizes

    def _arguments(self, rows: pa.Array) -> list[pa.Array]:
        """One array per argument, of its declared type."""
        out = []
        fields = rows.flatten()
        for i, t in enumerate(self.udaf.input_types):
            a = _arr(fields[i])
            out.append(a if a.type == t else a.cast(t))
        return out

    def _initial(self, n: int) -> list[pa.Array]:
        """The state columns of ``n`` groups holding no rows."""
        return [
            pa.repeat(pa.scalar(v, f.type), n) for f, v in zip(self.udaf.state, self.udaf.initial)
        ]

    def _partial(self, order: np.ndarray, sizes: np.ndarray) -> Part:
        rows, sizes = self._rows(order, sizes)
        start = self._initial(len(sizes))
        args = self._arguments(rows)
        state = self._failing(
            lambda: self.udaf.accumulate(start, args, _group_offsets(sizes), "accumulate")
        )
        return [*state, pa.array(sizes > 0)]

    # -- partial algebra --------------------------------------------------------------
    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        """One partial per group id: the partials with rows merged in row order, in rounds
        (round ``r`` merges every group's ``r``-th partial in one vectorized call)."""
        rows = np.flatnonzero(np.asarray(part[-1]))
        order = rows[np.argsort(gid[rows], kind="stable")]
        g = gid[order]
        head = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.empty(0, np.int64)
        rank = np.arange(len(g)) - np.repeat(head, np.diff(np.r_[head, len(g)]))
        state = self.take(part[:-1], order[head])
        owners = g[head]  # the group of each row of ``state``, increasing
        for r in range(1, int(rank.max()) + 1 if len(rank) else 1):
            at = np.flatnonzero(rank == r)
            pos = np.searchsorted(owners, g[at])
            left, right = self.take(state, pos), self.take(part[:-1], order[at])
            merged = self._failing(lambda left=left, right=right: self.udaf.merge(left, right))
            state = [scatter(c, pos, m) for c, m in zip(state, merged)]
        has = np.zeros(n_groups, np.bool_)
        has[owners] = True
        start = self._initial(n_groups)
        return [*(scatter(c, owners, a) for c, a in zip(start, state)), pa.array(has)]

    def merge(self, slots: np.ndarray, part: Part) -> None:
        new_has = np.asarray(part[-1])
        has_col = self.cols[-1]
        old_has = has_col.values[slots] & has_col.valid[slots]
        fresh = np.flatnonzero(new_has & ~old_has)
        if len(fresh):
            self.set(slots[fresh], self.take(part, fresh))
        both = np.flatnonzero(new_has & old_has)
        if len(both):
            idx = pa.array(both, pa.int64())
            left = [c.gather(slots[both]) for c in self.state_cols]
            right = [a.take(idx) for a in part[:-1]]
            merged = self._failing(lambda: self.udaf.merge(left, right))
            for c, a in zip(self.state_cols, merged):
                c.set(slots[both], a)

    def load(self, arrays: list[pa.Array], tables: dict[str, pa.Table], n_slots: int) -> None:
        """A checkpoint's state columns, refused when the function now declares another
        state (a new version of it): they would be read as what they are not."""
        got, want = [a.type for a in arrays], [c.type for c in self.cols]
        if got != want:
            raise CheckpointError(
                f"{self.operator}: the checkpoint holds the state of aggregate function "
                f"{self.udaf.name}() as {[str(t) for t in got]}, but the function now declares "
                f"{[str(t) for t in want]}; register the version that wrote it, or start over "
                "(fresh=True)"
            )
        super().load(arrays, tables, n_slots)

    def final(self, slots: np.ndarray) -> pa.Array:
        columns = [c.gather(slots) for c in self.state_cols]
        return self._failing(lambda: self.udaf.finish(columns))


@register_retracting
class PythonAggregateRetract(PythonAggregate):
    """Over a changelog: the partial is the group's argument rows (a list of structs),
    added to the slot's state by ``accumulate`` and taken back out by ``retract``."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if not self.udaf.retracts:
            raise PlanError(
                f"aggregate function {self.udaf.name}() reads a changelog but has no "
                "retract(state, *args) method to take retracted rows back out; add one"
            )

    def _extra_columns(self) -> list[SlotColumn]:
        return []

    def _partial(self, order: np.ndarray, sizes: np.ndarray) -> Part:
        rows, sizes = self._rows(order, sizes)
        parents = np.repeat(np.arange(len(sizes)), sizes)
        return [lists_from_parents(rows, parents, len(sizes))]

    def _apply(self, slots: np.ndarray, part: Part, how: str) -> None:
        lists = part[0]
        rows = _arr(pc.list_flatten(lists))
        sizes = np.asarray(pc.list_value_length(lists).fill_null(0))
        state = [c.gather(slots) for c in self.state_cols]
        args = self._arguments(rows)
        new = self._failing(lambda: self.udaf.accumulate(state, args, _group_offsets(sizes), how))
        for c, a in zip(self.state_cols, new):
            c.set(slots, a)

    def merge(self, slots: np.ndarray, part: Part) -> None:
        self._apply(slots, part, "accumulate")

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        self._apply(slots, part, "retract")
        return True
