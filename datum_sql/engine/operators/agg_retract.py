"""Aggregates over a changelog: each function as a state that can take rows back out.

An aggregate reading a changelog (the result of an unbounded GROUP BY, a top-N, ...) adds
the rows a ``+I``/``+U`` carries and retracts those a ``-U``/``-D`` carries
(``Agg.retract``). How each function retracts:

=====================================  ==================================================
function                               retracted by
=====================================  ==================================================
count, sum, avg                        subtraction (a NaN or infinity cannot be: the
                                       query fails rather than answer NaN)
var_*/stddev_*, corr, covar_*, regr_*  the Chan update solved backwards (agg_moments)
bit_and, bit_or, bit_xor               subtraction of per-bit counts (agg_bits)
min, max, bool_and, bool_or            the multiset of values per group: the extreme of
                                       what is left
f(DISTINCT x), every f                 the multiset of values: a value counts while a
                                       copy of it is left (array_agg: NULLs counted)
median, percentile_cont                the multiset of values (already kept)
array_agg, string_agg (ORDER BY)       the kept rows: one row equal in value and keys
                                       leaves (the earliest kept)
=====================================  ==================================================

``first_value``/``last_value`` cannot: which row was first is gone with it; the planner
refuses them over a changelog. A retraction of something that is not there (a changelog
that retracts a row it never inserted) fails the query.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.operators import (
    agg_bits,
    agg_distinct,
    agg_distinct_lists,
    agg_moments,
    agg_ordered,
)
from datum_sql.engine.operators.aggregates import (
    Agg,
    ApproxPercentile,
    Avg,
    Count,
    CountDistinct,
    CountStar,
    Part,
    Sum,
    _arr,
    _idx,
    group_reduce,
    register_retracting,
)
from datum_sql.engine.state.retract import rows_to_remove

_SUBTRACTING: tuple[type[Agg], ...] = (
    CountStar, Count, Sum, Avg, ApproxPercentile,
    agg_moments.VarSamp, agg_moments.VarPop, agg_moments.StddevSamp, agg_moments.StddevPop,
    agg_bits.BitAnd, agg_bits.BitOr, agg_bits.BitXor, *agg_moments.CO_MOMENTS,
)  # fmt: skip
for _cls in _SUBTRACTING:
    register_retracting(_cls)


class _Multiset(CountDistinct):
    """The values of each group with their copies; a batch's partial is every value."""

    multi = True

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [(self.alias, "list")]


@register_retracting
class CountDistinctRetract(_Multiset):
    func = "count_distinct"


@register_retracting
class SumDistinctRetract(_Multiset, agg_distinct.SumDistinct):
    func = "sum_distinct"


@register_retracting
class AvgDistinctRetract(_Multiset, agg_distinct.AvgDistinct):
    func = "avg_distinct"


@register_retracting
class BitXorDistinctRetract(_Multiset, agg_distinct.BitXorDistinct):
    func = "bit_xor_distinct"


@register_retracting
class VarSampDistinctRetract(_Multiset, agg_distinct.VarSampDistinct):
    func = "var_samp_distinct"


@register_retracting
class VarPopDistinctRetract(_Multiset, agg_distinct.VarPopDistinct):
    func = "var_pop_distinct"


@register_retracting
class StddevSampDistinctRetract(_Multiset, agg_distinct.StddevSampDistinct):
    func = "stddev_samp_distinct"


@register_retracting
class StddevPopDistinctRetract(_Multiset, agg_distinct.StddevPopDistinct):
    func = "stddev_pop_distinct"


@register_retracting
class PercentileDistinctRetract(_Multiset, agg_distinct.PercentileDistinct):
    func = "approx_percentile_distinct"


@register_retracting
class ArrayAggDistinctRetract(agg_distinct_lists.ArrayAggDistinct):
    """Its batch partial is every value (and its NULL count), as :class:`_Multiset`'s."""

    func = "array_agg_distinct"
    multi = True


@register_retracting
class StringAggDistinctRetract(_Multiset, agg_distinct_lists.StringAggDistinct):
    func = "string_agg_distinct"


class _ExtremeRetract(_Multiset):
    """min/max: the extreme of each group's multiset (NaN and NULLs as in ``min``/``max``)."""

    op = "min"

    def final(self, slots: np.ndarray) -> pa.Array:
        pos, values = self.set_.distinct_values(slots)
        return group_reduce(values, pos, len(slots), self.op)


@register_retracting
class MinRetract(_ExtremeRetract):
    func = "min"


@register_retracting
class MaxRetract(_ExtremeRetract):
    func = "max"
    op = "max"


@register_retracting
class BoolAndRetract(MinRetract):
    func = "bool_and"


@register_retracting
class BoolOrRetract(MaxRetract):
    func = "bool_or"


class _RowsRetract(agg_ordered.ArrayAgg):
    """array_agg/string_agg: a retracted row removes one kept row of its group that is
    equal in value and in every ORDER BY key, the earliest kept. Rows tied on every key
    stay in arrival order, so with such ties the result is one of the orders SQL allows,
    not always the one the retracted row's twin would have given."""

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        lists = part[0]
        gone = _arr(pc.list_flatten(lists))
        if len(gone) == 0:
            return True
        gone_slots = slots[np.asarray(pc.list_parent_indices(lists))]
        _, sel = self.store.select(np.unique(gone_slots), self.n_slots)
        kept = self.store.rows().take(_idx(sel))
        names = [f.name for f in self.row_type if f.name != agg_ordered.SEQ]
        drop = rows_to_remove(
            [pa.array(self.store.slot[sel]), *(_arr(kept.field(nm)) for nm in names)],
            np.asarray(kept.field(agg_ordered.SEQ)),
            [pa.array(gone_slots), *(_arr(gone.field(nm)) for nm in names)],
        )
        if drop is None:
            return False
        keep = np.ones(len(self.store.slot), np.bool_)
        keep[sel[drop]] = False
        self.store.keep(keep, self.store.slot[keep])
        return True


@register_retracting
class ArrayAggRetract(_RowsRetract):
    func = "array_agg"


@register_retracting
class StringAggRetract(_RowsRetract, agg_ordered.StringAgg):
    func = "string_agg"
