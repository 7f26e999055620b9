"""``sum``, ``avg``, ``bit_xor``, ``var_samp``/``var_pop``/``stddev_samp``/``stddev_pop``
and the percentiles of DISTINCT values: the value set of ``count(DISTINCT x)``, reduced at
the end.

The state is :class:`~datum_sql.engine.operators.aggregates.CountDistinct`'s set of
(slot, value) pairs, so merging, snapshots and purges are the same; only the final value
differs: the sum (typed as ``sum``'s), the mean (float64), the bitwise xor (the input's
type), the variance or standard deviation (float64, two-pass over the distinct values, as
:mod:`~datum_sql.engine.operators.agg_moments` computes a batch's) or the exact percentile
(:mod:`datum_sql.engine.percentile`, which ``ctx.sql`` calls too) of each slot's distinct
non-NULL values, NULL when there are none. ``min``/``max``/``bool_and``/``bool_or``/
``bit_and``/``bit_or`` of DISTINCT values are the plain aggregates and need no set (the
planner maps them): a duplicate cannot change them. ``array_agg``/``string_agg`` of
DISTINCT values are in :mod:`~datum_sql.engine.operators.agg_distinct_lists`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from datum_sql.engine.operators.agg_moments import moments, spread
from datum_sql.engine.operators.aggregates import (
    CountDistinct,
    _sum_type,
    group_reduce,
    register_function,
)
from datum_sql.engine.percentile import as_float64, check_q, interpolate
from datum_sql.engine.state.slots import from_numpy, numpy_dtype, to_numpy
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
        pos, values = self.set_.distinct_values(slots)
        return group_reduce(values.cast(self.sum_type), pos, len(slots), "sum")

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
        pos, values = self.set_.distinct_values(slots)
        out, has = xor_groups(values, pos, len(slots))
        return from_numpy(out, has, pa.int64()).cast(self.out_type, safe=False)


class _SpreadDistinct(CountDistinct):
    """The variance (``root``: standard deviation) of the distinct values; ``ddof`` 1 for
    the sample's, 0 for the population's."""

    ddof = 1
    root = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        t = self.in_type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)):
            name = self.func.removesuffix("_distinct")
            raise PlanError(f"{name} of {t} is not supported; cast the column to a number")

    def final(self, slots: np.ndarray) -> pa.Array:
        pos, values = self.set_.distinct_values(slots)
        v, _ = to_numpy(values.cast(pa.float64()))
        n, _, m2 = moments(pos, v, len(slots))
        return spread(n, m2, self.ddof, self.root)


@register_function
class VarSampDistinct(_SpreadDistinct):
    func = "var_samp_distinct"


@register_function
class VarPopDistinct(_SpreadDistinct):
    func = "var_pop_distinct"
    ddof = 0


@register_function
class StddevSampDistinct(_SpreadDistinct):
    func = "stddev_samp_distinct"
    root = True


@register_function
class StddevPopDistinct(_SpreadDistinct):
    func = "stddev_pop_distinct"
    ddof = 0
    root = True


@register_function
class PercentileDistinct(CountDistinct):
    """``percentile_cont(DISTINCT x, q)``, ``median(DISTINCT x)``, ...: the exact
    percentile of the distinct values."""

    func = "approx_percentile_distinct"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.q = check_q(self.params.get("q", 0.5))
        if numpy_dtype(self.in_type) is None and not pa.types.is_decimal(self.in_type):  # type: ignore[arg-type]
            raise PlanError(f"approx_percentile of {self.in_type} is not supported")

    def final(self, slots: np.ndarray) -> pa.Array:
        pos, values = self.set_.distinct_values(slots)
        if len(values) == 0:
            return pa.nulls(len(slots), pa.float64())
        out, has = interpolate(as_float64(values), pos, len(slots), self.q)
        return from_numpy(out, has, pa.float64())
