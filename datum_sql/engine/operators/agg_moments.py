"""Variance and standard deviation as mergeable ``(n, mean, M2)`` partials.

``M2`` is the sum of squared deviations from the mean. A batch's partial per group is
two-pass (the group mean first, then the squared deviations from it), never the
cancellation-prone ``sum(x²) - sum(x)²/n``; partials combine with Chan, Golub and
LeVeque's parallel update, vectorized over slots::

    n = na + nb,  d = mean_b - mean_a,  mean = mean_a + d * nb / n,
    M2 = M2a + M2b + d² * na * nb / n

=============  ===================================  ==================================
function       SQL                                  final (float64)
=============  ===================================  ==================================
var_samp       var_samp, variance                   M2 / (n - 1), NULL when n < 2
var_pop        var_pop                              M2 / n, NULL when n = 0
stddev_samp    stddev_samp, stddev                  sqrt(var_samp)
stddev_pop     stddev_pop                           sqrt(var_pop)
=============  ===================================  ==================================

NULLs are skipped. As in DuckDB, the M2 of a single value is 0 whatever the value, and a
NaN or infinite input among two or more makes the result NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.operators.aggregates import Agg, Part, _arr, group_sizes, register_function
from datum_sql.engine.state.slots import SlotColumn, from_numpy, to_numpy
from datum_sql.errors import PlanError


def _floats(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values as float64, valid) of a numeric column."""
    v, ok = to_numpy(arr.cast(pa.float64()))
    return v, ok


def _combine(
    n: np.ndarray, mean: np.ndarray, m2: np.ndarray, gid: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (n, mean, M2) of each group id from the partials of its rows."""
    total = np.bincount(gid, weights=n, minlength=n_groups).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        weighted = np.bincount(gid, weights=np.where(n > 0, n * mean, 0.0), minlength=n_groups)
        g_mean = np.where(total > 0, weighted / total, 0.0)
        dev = mean - g_mean[gid]
        g_m2 = np.bincount(
            gid, weights=np.where(n > 0, m2 + n * dev * dev, 0.0), minlength=n_groups
        )
    g_m2 = np.where(total == 1, 0.0, g_m2)
    return np.rint(total).astype(np.int64), g_mean.astype(np.float64), g_m2.astype(np.float64)


#: A bound on the relative rounding error of one retraction's arithmetic (a few ulps).
_ROUNDING = 16 * np.finfo(np.float64).eps


class _Moments(Agg):
    ddof = 1
    root = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        t = self.in_type
        if t is None or not (
            pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
        ):
            raise PlanError(f"{self.func} of {t} is not supported; cast the column to a number")
        self.cols = [
            SlotColumn(pa.int64(), 0),
            SlotColumn(pa.float64(), 0.0),
            SlotColumn(pa.float64(), 0.0),
        ]
        self.fast = True

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        assert self.input is not None
        return {self.alias: _arr(batch.column(self.input)).cast(pa.float64())}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [
            (self.alias, "count", pc.CountOptions(mode="only_valid")),
            (self.alias, "mean", pc.ScalarAggregateOptions(min_count=0)),
            (self.alias, "variance", pc.VarianceOptions(ddof=0, min_count=0)),
        ]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        n = np.asarray(_arr(outs[0]))
        mean = to_numpy(_arr(outs[1]))[0]  # (NaN or NULL over no values: made 0)
        var = to_numpy(_arr(outs[2]))[0]
        mean = np.where(n > 0, mean, 0.0)
        m2 = np.where(n > 1, var * n, 0.0)
        return [pa.array(n, pa.int64()), pa.array(mean, pa.float64()), pa.array(m2, pa.float64())]

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        assert self.input is not None
        v, ok = _floats(_arr(batch.column(self.input)))
        all_ok = bool(ok.all())
        g, v = (gid, v) if all_ok else (gid[ok], v[ok])
        n = group_sizes(g, n_groups, sizes if all_ok else None)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.bincount(g, weights=v, minlength=n_groups) / n
        mean = np.where(n > 0, mean, 0.0)
        dev = v - mean[g]
        m2 = np.where(n == 1, 0.0, np.bincount(g, weights=dev * dev, minlength=n_groups))
        # (bincount of no rows is an integer array, even with weights)
        return [
            pa.array(n.astype(np.int64)),
            pa.array(mean, pa.float64()),
            pa.array(m2, pa.float64()),
        ]

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        n, mean, m2 = (to_numpy(a)[0] for a in part)
        tn, tmean, tm2 = _combine(n.astype(np.float64), mean, m2, gid, n_groups)
        return [pa.array(tn), pa.array(tmean), pa.array(tm2)]

    def merge(self, slots: np.ndarray, part: Part) -> None:
        cn, cmean, cm2 = self.cols
        nb = to_numpy(part[0])[0].astype(np.float64)
        mb, m2b = to_numpy(part[1])[0], to_numpy(part[2])[0]
        na = cn.values[slots].astype(np.float64)
        ma, m2a = cmean.values[slots], cm2.values[slots]
        n = na + nb
        with np.errstate(invalid="ignore", divide="ignore"):
            d = mb - ma
            ratio = np.where(n > 0, nb / n, 0.0)
            mean = np.where(nb > 0, ma + d * ratio, ma)
            m2 = np.where(nb > 0, m2a + m2b + d * d * na * ratio, m2a)
        m2 = np.where(n == 1, 0.0, m2)
        cn.values[slots] = np.rint(n).astype(np.int64)
        cmean.values[slots] = mean
        cm2.values[slots] = m2

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        """The Chan update solved for what was there before ``part`` merged: ``na = n - nb``,
        ``mean_a = (n mean - nb mean_b) / na``, ``M2a = M2 - M2b - d² na nb / n``."""
        cn, cmean, cm2 = self.cols
        nb = to_numpy(part[0])[0].astype(np.float64)
        mb, m2b = to_numpy(part[1])[0], to_numpy(part[2])[0]
        if not (np.isfinite(mb).all() and np.isfinite(m2b).all()):
            return False  # a NaN or an infinity cannot be subtracted back out
        n = cn.values[slots].astype(np.float64)
        mean, m2 = cmean.values[slots], cm2.values[slots]
        na = n - nb
        live = na > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            safe = np.where(live, na, 1.0)
            mean_a = np.where(nb > 0, (n * mean - nb * mb) / safe, mean)
            d = mb - mean_a
            m2_a = np.where(nb > 0, m2 - m2b - d * d * na * nb / np.where(n > 0, n, 1.0), m2)
            # What is left below the rounding error of the subtraction is that error, not
            # a spread: a group of equal values keeps M2 0, as a batch computes it.
            noise = _ROUNDING * (m2 + np.abs(d) * (n * np.abs(mean) + nb * np.abs(mb)) * nb / safe)
        m2_a = np.where((na <= 1) | (m2_a <= noise), 0.0, m2_a)
        cn.values[slots] = np.rint(np.maximum(na, 0)).astype(np.int64)
        cmean.values[slots] = np.where(live, mean_a, 0.0)
        cm2.values[slots] = np.where(live, m2_a, 0.0)
        return True

    def final(self, slots: np.ndarray) -> pa.Array:
        n = self.cols[0].values[slots]
        m2 = self.cols[2].values[slots]
        ok = n > self.ddof
        with np.errstate(invalid="ignore", divide="ignore"):
            var = m2 / np.where(ok, n - self.ddof, 1)
            out = np.sqrt(var) if self.root else var
        return from_numpy(np.where(ok, out, 0.0), ok, pa.float64())


@register_function
class VarSamp(_Moments):
    func = "var_samp"


@register_function
class VarPop(_Moments):
    func = "var_pop"
    ddof = 0


@register_function
class StddevSamp(_Moments):
    func = "stddev_samp"
    root = True


@register_function
class StddevPop(_Moments):
    func = "stddev_pop"
    ddof = 0
    root = True
