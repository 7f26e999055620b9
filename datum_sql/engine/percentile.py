"""Exact ``percentile_cont``: one computation, which the streaming aggregate and ``ctx.sql``
both call, so the two paths give the same float64 bit for bit.

DataFusion's own ``percentile_cont`` interpolates with a rounded fraction (1.899999 where
the answer is 1.9), so the batch SQL reads
``__datum_percentile_cont(array_sort(CAST(array_agg(x) AS DOUBLE[])), q)`` instead:
DataFusion gathers and sorts each group's values and this module interpolates them.

The definition (PostgreSQL's and DuckDB's ``quantile_cont``): a group's non-NULL values
sorted ascending (NaN after every number, -0.0 read as 0.0), ``n`` of them; the rank
``r = q * (n - 1)``, ``lo = floor(r)``, ``f = r - lo``; the result is ``v[lo]`` when
``f == 0``, else ``v[lo] + (v[lo + 1] - v[lo]) * f`` (``v[lo] * (1 - f) + v[lo + 1] * f``
when that difference is not finite, as DuckDB answers); NULL for a group without values.
Values are read as float64 as DataFusion's ``CAST(x AS DOUBLE)`` reads them (the batch SQL
casts with it): integers and floats by Arrow's cast, which agrees with it; decimals by
DataFusion itself, whose cast differs from pyarrow's in the last bit of some values.
"""

from __future__ import annotations

import datafusion
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.errors import PlanError

#: The batch SQL's name of the interpolation (internal: not a function users call).
UDF_NAME = "__datum_percentile_cont"


def check_q(q: float) -> float:
    """``q`` as a float, refused outside [0, 1] with the one message of both paths."""
    value = float(q)
    if not 0.0 <= value <= 1.0:
        raise PlanError(f"approx_percentile: the percentile must be in [0, 1], got {q}")
    return value


def as_float64(values: pa.Array) -> np.ndarray:
    """``values`` (numbers, no NULLs) as float64, as ``CAST(x AS DOUBLE)`` reads them."""
    if pa.types.is_decimal(values.type):
        frame = datafusion.SessionContext().from_arrow(pa.table({"v": values}))
        cast = frame.select(datafusion.col("v").cast(pa.float64()).alias("v"))
        values = cast.to_arrow_table().column(0).combine_chunks()
    return np.asarray(values.cast(pa.float64()), np.float64)


def interpolate(
    v: np.ndarray,
    group: np.ndarray,
    n_groups: int,
    q: float,
    copies: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(the percentile ``q`` of each group's values, whether the group has any): ``v[i]``
    is a value of group ``group[i]``, held ``copies[i]`` times (once when None)."""
    v = np.asarray(v, np.float64) + 0.0  # -0.0 becomes 0.0: its place among ties is moot
    group = np.asarray(group, np.int64)
    order = np.lexsort((v, group))
    v, group = v[order], group[order]
    if copies is None:
        return _pick(v, np.bincount(group, minlength=n_groups), q)
    reps = np.asarray(copies, np.int64)[order]
    n = np.bincount(group, weights=reps, minlength=n_groups).astype(np.int64)
    return _pick(v, n, q, np.cumsum(reps))


def of_runs(v: np.ndarray, n: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`interpolate` of groups stored one after another, ``n[i]`` values each (as
    DataFusion's lists hold them, sorted already: sorting again would cost more than the
    rest together, so it is skipped when no value is out of order)."""
    v = np.asarray(v, np.float64) + 0.0
    n = np.asarray(n, np.int64)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.diff(v) >= 0  # false beside a NaN: sorted again, NaN last
    ends = np.cumsum(n)[:-1]
    ok[ends[(ends > 0) & (ends < len(v))] - 1] = True  # a new group may start lower
    if not ok.all():
        group = np.repeat(np.arange(len(n)), n)
        v = v[np.lexsort((v, group))]
    return _pick(v, n, q)


def _pick(
    v: np.ndarray, n: np.ndarray, q: float, ends: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The percentile of groups of sorted values, ``n`` of each one after another (each
    value held until its 1-based rank ``ends[i]`` when given, else once)."""
    start = np.concatenate([[0], np.cumsum(n)])[:-1]  # rank offset of each group
    has = n > 0
    if len(v) == 0:
        return np.zeros(len(n)), has
    rank = q * (np.maximum(n, 1) - 1)  # 0-based fractional rank in the group
    lo = np.floor(rank).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    frac = rank - lo
    if ends is None:
        last = len(v) - 1
        low, high = v[np.minimum(start + lo, last)], v[np.minimum(start + hi, last)]
    else:
        low, high = _at(v, ends, start + lo), _at(v, ends, start + hi)
    with np.errstate(invalid="ignore", over="ignore"):
        step = high - low
        # an infinite (or overflowing) step: the weighted mean, so that between -inf and a
        # number lies -inf (not -inf + inf = NaN), and between -1e308 and 1e308 lies 0
        between = np.where(np.isfinite(step), low + step * frac, low * (1 - frac) + high * frac)
        out = np.where(frac == 0, low, between)  # an exact rank reads no neighbour
    return np.where(has, out, 0.0), has


def _at(v: np.ndarray, ends: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The value of 0-based ``rank`` among values held ``ends``-cumulative times."""
    idx = np.searchsorted(ends, rank, side="right")
    return v[np.minimum(idx, len(v) - 1)]


def of_lists(lists: pa.Array | pa.ChunkedArray, q: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The percentile ``q`` (a constant) of each list's non-NULL values: the batch SQL's
    ``__datum_percentile_cont(array_sort(CAST(array_agg(x) AS DOUBLE[])), q)``."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    if isinstance(q, pa.ChunkedArray):
        q = q.combine_chunks()
    if len(lists) == 0:
        return pa.array([], pa.float64())
    quantile = check_q(q[0].as_py())
    flat = lists.flatten()  # the values of the valid lists, in order
    if flat.null_count:
        ok = np.asarray(flat.is_valid())
        parents = np.asarray(pc.list_parent_indices(lists))
        n = np.bincount(parents[ok], minlength=len(lists))
        flat = flat.filter(pa.array(ok))
    else:
        n = np.asarray(pc.list_value_length(lists).fill_null(0), np.int64)
    out, has = of_runs(as_float64(flat), n, quantile)
    return pa.array(out, pa.float64(), mask=~has)


def datafusion_udf() -> datafusion.ScalarUDF:
    """:func:`of_lists` as the DataFusion function the batch SQL calls."""
    return datafusion.udf(
        of_lists, [pa.list_(pa.float64()), pa.float64()], pa.float64(), "immutable", UDF_NAME
    )
