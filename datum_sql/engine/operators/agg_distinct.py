"""``sum(DISTINCT x)`` and ``avg(DISTINCT x)``: the value set of ``count(DISTINCT x)``,
summed at the end.

The state is :class:`~datum_sql.engine.operators.aggregates.CountDistinct`'s set of
(slot, value) pairs, so merging, snapshots and purges are the same; only the final value
differs: the sum (typed as ``sum``'s) or the mean (float64) of each slot's distinct
non-NULL values, NULL when there are none. ``min``/``max``/``bool_and``/``bool_or`` of
DISTINCT values are the plain aggregates and need no set (the planner maps them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.operators.aggregates import (
    _MASK32,
    CountDistinct,
    _idx,
    _sum_type,
    group_reduce,
    register_function,
)
from datum_sql.engine.state.slots import from_numpy, to_numpy


@register_function
class SumDistinct(CountDistinct):
    func = "sum_distinct"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.in_type is not None
        self.sum_type = _sum_type(self.in_type)

    def _sums(self, slots: np.ndarray) -> pa.Array:
        """The sum of each slot's distinct values (NULL for a slot without any)."""
        s = self.set_
        pos, sel = s.select(slots)
        values = s.values().take(_idx(s.pairs[sel] & _MASK32)).cast(self.sum_type)
        return group_reduce(values, pos, len(slots), "sum")

    def final(self, slots: np.ndarray) -> pa.Array:
        return self._sums(slots)


@register_function
class AvgDistinct(SumDistinct):
    func = "avg_distinct"

    def final(self, slots: np.ndarray) -> pa.Array:
        total, ok = to_numpy(self._sums(slots).cast(pa.float64()))
        count = self.set_.kinds.values[slots]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / np.where(ok, count, 1)
        return from_numpy(mean, ok, pa.float64())
