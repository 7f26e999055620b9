"""``sum(DISTINCT x)``, ``avg(DISTINCT x)`` and ``bit_xor(DISTINCT x)``: the value set of
``count(DISTINCT x)``, summed (or xor-ed) at the end.

The state is :class:`~datum_sql.engine.operators.aggregates.CountDistinct`'s set of
(slot, value) pairs, so merging, snapshots and purges are the same; only the final value
differs: the sum (typed as ``sum``'s), the mean (float64) or the bitwise xor (the input's
type) of each slot's distinct non-NULL values, NULL when there are none. ``min``/``max``/
``bool_and``/``bool_or``/``bit_and``/``bit_or`` of DISTINCT values are the plain aggregates
and need no set (the planner maps them): a duplicate cannot change them.
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
from datum_sql.engine.xor_distinct import xor_groups
from datum_sql.errors import PlanError


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


@register_function
class BitXorDistinct(CountDistinct):
    """A duplicate flips every bit back, so xor needs the distinct values themselves
    (:mod:`datum_sql.engine.xor_distinct`, which ``ctx.sql`` calls too)."""

    func = "bit_xor_distinct"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        if self.in_type is None or not pa.types.is_integer(self.in_type):
            raise PlanError(f"bit_xor of {self.in_type} is not supported: it takes integers")

    def final(self, slots: np.ndarray) -> pa.Array:
        s = self.set_
        pos, sel = s.select(slots)
        out, has = xor_groups(s.values().take(_idx(s.pairs[sel] & _MASK32)), pos, len(slots))
        return from_numpy(out, has, pa.int64()).cast(self.out_type, safe=False)
