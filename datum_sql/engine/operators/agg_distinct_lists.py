"""``array_agg(DISTINCT x ORDER BY x)`` and ``string_agg(DISTINCT x, sep ORDER BY x)``: the
value set of ``count(DISTINCT x)``, listed in value order at the end.

The ORDER BY of a DISTINCT list is its argument (plan/distinct.py refuses any other), ascending
or descending (``desc`` param), NaN above every number; without one, ascending. The state is
:class:`~datum_sql.engine.operators.aggregates.CountDistinct`'s set, so merging, snapshots
and purges are the same. ``array_agg`` keeps a NULL value too, once, first or last
(``nulls_first``): its input is ``{v: x}``, NULL as a whole for a row a FILTER skips, and
besides the set each slot counts its rows whose ``v`` is NULL. ``string_agg`` skips NULLs.
A group without a value (or, for ``array_agg``, a NULL) is NULL.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.operators.aggregates import (
    CountDistinct,
    Part,
    _arr,
    register_function,
    regroup_lists,
)
from datum_sql.engine.state.slots import SlotColumn, to_numpy
from datum_sql.errors import PlanError


def sorted_lists(
    pos: np.ndarray,
    values: pa.Array,
    n: int,
    desc: bool,
    nulls: np.ndarray | None = None,
    nulls_first: bool = False,
) -> pa.Array:
    """``n`` lists: list ``i`` the ``values`` whose ``pos`` is ``i``, sorted (descending
    when ``desc``; NaN above every number), with a NULL first or last where ``nulls[i]``;
    NULL where it holds nothing."""
    direction = "descending" if desc else "ascending"
    keys = {"p": pa.array(pos, pa.int64()), "v": values}
    sort = [("p", "ascending"), ("v", direction)]
    if pa.types.is_floating(values.type):  # Arrow puts NaN last in both directions
        keys["nan"] = pc.is_nan(values)
        sort.insert(1, ("nan", direction))
    order = pc.sort_indices(pa.table(keys), sort_keys=sort)
    flat, parent = values.take(order), pos[np.asarray(order)]
    if nulls is not None and nulls.any():
        null_pos = np.flatnonzero(nulls)
        rank = np.concatenate(
            [np.arange(len(flat)), np.full(len(null_pos), -1 if nulls_first else len(flat))]
        )
        parent = np.concatenate([parent, null_pos])
        flat = pa.concat_arrays([flat, pa.nulls(len(null_pos), flat.type)])
        idx = np.lexsort((rank, parent))
        flat, parent = flat.take(pa.array(idx, pa.int64())), parent[idx]
    sizes = np.bincount(parent, minlength=n)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), flat, mask=pa.array(sizes == 0))


@register_function
class StringAggDistinct(CountDistinct):
    """The distinct non-NULL texts of a group in value order, joined by ``separator``."""

    func = "string_agg_distinct"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        sep = self.params.get("separator")
        if not isinstance(sep, str):
            raise PlanError(f"string_agg: the separator must be a text literal, got {sep!r}")
        self.separator = sep
        self.desc = bool(self.params.get("desc", 0.0))

    def final(self, slots: np.ndarray) -> pa.Array:
        pos, values = self.set_.distinct_values(slots)
        lists = sorted_lists(pos, values.cast(pa.large_string()), len(slots), self.desc)
        return pc.binary_join(lists, pa.scalar(self.separator, pa.large_string()))


@register_function
class ArrayAggDistinct(CountDistinct):
    """The distinct values of a group in value order, a NULL among them once."""

    func = "array_agg_distinct"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.desc = bool(self.params.get("desc", 0.0))
        self.nulls_first = bool(self.params.get("nulls_first", float(self.desc)))
        #: Each slot's rows whose value is NULL.
        self.nulls = SlotColumn(pa.int64(), 0)
        self.cols = [self.nulls]

    def value_type(self) -> pa.DataType:
        assert self.in_type is not None
        return self.in_type.field("v").type

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        assert self.input is not None
        rows = _arr(batch.column(self.input))
        value = pc.struct_field(rows, "v")  # NULL where the row is (a FILTER skips it)
        null = pc.and_(rows.is_valid(), value.is_null())
        return {self.alias: value, f"{self.alias}n": null.cast(pa.int64())}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        values = (self.alias, "list") if self.multi else super().batch_specs()[0]
        return [values, (f"{self.alias}n", "sum")]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        return [_arr(outs[0]), _arr(outs[1])]

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        nulls = np.bincount(gid, weights=to_numpy(part[1])[0], minlength=n_groups)
        return [regroup_lists(part[0], gid, n_groups), pa.array(nulls.astype(np.int64))]

    def grow(self, n: int) -> None:
        super().grow(n)
        self.nulls.grow(n)

    def compact(self, keep: np.ndarray, remap: np.ndarray) -> None:
        super().compact(keep, remap)
        self.nulls.compact(keep)

    def gather(self, slots: np.ndarray) -> Part:
        return [*super().gather(slots), self.nulls.gather(slots)]

    def set(self, slots: np.ndarray, part: Part) -> None:
        super().set(slots, part[:1])
        self.nulls.set(slots, part[1])

    def merge(self, slots: np.ndarray, part: Part) -> None:
        super().merge(slots, part[:1])
        self.nulls.values[slots] += to_numpy(part[1])[0]

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        left = self.nulls.values[slots] - to_numpy(part[1])[0]
        if (left < 0).any() or not super().retract(slots, part[:1]):
            return False
        self.nulls.values[slots] = left
        return True

    def final(self, slots: np.ndarray) -> pa.Array:
        pos, values = self.set_.distinct_values(slots)
        nulls = self.nulls.values[slots] > 0
        return sorted_lists(pos, values, len(slots), self.desc, nulls, self.nulls_first)

    def state_arrays(self) -> list[pa.Array]:
        return [self.nulls.to_arrow()]

    def load(self, arrays: list[pa.Array], tables: dict[str, pa.Table], n_slots: int) -> None:
        super().load(arrays, tables, n_slots)
        self.nulls.load(arrays[0])

    @property
    def nbytes(self) -> int:
        return self.set_.nbytes + self.nulls.nbytes
