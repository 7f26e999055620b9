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

The two-input functions ``f(y, x)`` (y is the first argument) keep the co-moments
``(n, mean_x, mean_y, M2x, M2y, Cxy)`` of the rows where both are non-NULL, merged by the
bivariate update (``Cxy = Ca + Cb + dx * dy * na * nb / n``, M2 as above). Their finals
are DataFusion's, which ``ctx.sql`` runs (where DuckDB differs, it says so)::

    covar_samp Cxy / (n-1)   covar_pop Cxy / n   corr Cxy / sqrt(M2x M2y)
    regr_slope Cxy / M2x     regr_intercept mean_y - slope mean_x
    regr_r2 Cxy² / (M2x M2y) regr_count n        regr_avgx/avgy mean_x/mean_y
    regr_sxx M2x   regr_syy M2y   regr_sxy Cxy

A group of one value keeps a spread of exactly 0 (constant x gives a NULL slope, not a
quotient of rounding errors); the M2 of a single NaN or infinity is NaN, as DataFusion's.
"""

from __future__ import annotations

from dataclasses import dataclass
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
        n, mean, m2 = moments(g, v, n_groups, sizes if all_ok else None)
        return [pa.array(n), pa.array(mean, pa.float64()), pa.array(m2, pa.float64())]

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
        return spread(self.cols[0].values[slots], self.cols[2].values[slots], self.ddof, self.root)


def moments(
    g: np.ndarray, v: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (n, mean, M2) of each group id from the (non-NULL) values ``v`` of its rows,
    two-pass; ``sizes``, when counted already, the rows of each group."""
    n = group_sizes(g, n_groups, sizes)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(g, weights=v, minlength=n_groups) / n
    mean = np.where(n > 0, mean, 0.0)
    dev = v - mean[g]
    m2 = np.where(n == 1, 0.0, np.bincount(g, weights=dev * dev, minlength=n_groups))
    # (bincount of no rows is an integer array, even with weights)
    return n.astype(np.int64), mean.astype(np.float64), m2.astype(np.float64)


def spread(n: np.ndarray, m2: np.ndarray, ddof: int, root: bool) -> pa.Array:
    """The variance (``root``: standard deviation) of groups of ``n`` values whose squared
    deviations sum to ``m2``: NULL with ``ddof`` values or fewer."""
    ok = n > ddof
    with np.errstate(invalid="ignore", divide="ignore"):
        var = m2 / np.where(ok, n - ddof, 1)
        out = np.sqrt(var) if root else var
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


# -- two inputs: co-moments -------------------------------------------------------------------
# The partial of corr/covar/regr_*, over the rows where both inputs are non-NULL:
# (n, mean_x, mean_y, M2x, M2y, Cxy), Cxy the sum of (x - mean_x)(y - mean_y).


def _anchor(
    gid: np.ndarray, n_groups: int, values: np.ndarray, mean: np.ndarray, spread: np.ndarray
) -> np.ndarray:
    """``mean`` with the mean of each group whose ``values`` are all one value (and whose
    ``spread`` is 0) made exactly that value: a sum divided back rounds (0.1 + 0.2 is not
    0.3), and a constant column must keep a spread of exactly 0, as a batch's running
    update does, or corr and regr_slope would divide rounding by rounding."""
    ref = np.zeros(n_groups)
    ref[gid] = values  # some value of each group
    differs = (values != ref[gid]) | (spread != 0)
    uneven = np.bincount(gid, weights=differs, minlength=n_groups) > 0
    return np.where(uneven, mean, ref)


def _pair_moments(
    g: np.ndarray, x: np.ndarray, y: np.ndarray, n_groups: int, n: np.ndarray | None = None
) -> Part:
    """The co-moment partial of each group id from its rows' (x, y), two-pass."""
    if n is None:
        n = np.bincount(g, minlength=n_groups).astype(np.int64)
    zero = np.zeros(len(g))
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = np.where(n > 0, np.bincount(g, weights=x, minlength=n_groups) / n, 0.0)
        my = np.where(n > 0, np.bincount(g, weights=y, minlength=n_groups) / n, 0.0)
        mx = _anchor(g, n_groups, x, mx, zero)
        my = _anchor(g, n_groups, y, my, zero)
        dx, dy = x - mx[g], y - my[g]
        sums = [np.bincount(g, weights=w, minlength=n_groups) for w in (dx * dx, dy * dy, dx * dy)]
    # (bincount of no rows is an integer array, even with weights)
    return [pa.array(n.astype(np.int64))] + [
        pa.array(np.asarray(a, np.float64), pa.float64()) for a in (mx, my, *sums)
    ]


def _unpack(part: Part) -> list[np.ndarray]:
    """The partial's columns as numpy arrays, n as float64."""
    out = [to_numpy(a)[0] for a in part]
    out[0] = out[0].astype(np.float64)
    return out


@dataclass(frozen=True)
class CoSums:
    """The co-moments of slots, as their finals read them (n as float64)."""

    n: np.ndarray
    mx: np.ndarray
    my: np.ndarray
    m2x: np.ndarray
    m2y: np.ndarray
    c: np.ndarray


#: (value, valid) of a final.
Final = tuple[np.ndarray, np.ndarray]


class _CoMoments(Agg):
    """``f(y, x)``: ``input`` is the first argument (y), ``input2`` the second (x)."""

    arity = 2

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        for which, t in (("first", self.in_type), ("second", self.in_type2)):
            if t is None or not (
                pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
            ):
                raise PlanError(
                    f"{self.func} of {t} (its {which} argument) is not supported; cast the "
                    "column to a number"
                )
        # n, then mean_x, mean_y, M2x, M2y, Cxy
        self.cols = [SlotColumn(pa.int64(), 0)] + [SlotColumn(pa.float64(), 0.0) for _ in range(5)]
        self.fast = True
        self.y_alias, self.x_alias = f"__a{self.idx}", f"__b{self.idx}"

    def _pairs(self, y: pa.Array, x: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(x, y, both non-NULL) as float64 numpy arrays."""
        yv, yok = _floats(y)
        xv, xok = _floats(x)
        return xv, yv, xok & yok

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        assert self.input is not None and self.input2 is not None
        return {
            self.y_alias: _arr(batch.column(self.input)).cast(pa.float64()),
            self.x_alias: _arr(batch.column(self.input2)).cast(pa.float64()),
        }

    def batch_specs(self) -> list[tuple[Any, ...]]:
        # Each group's values in row order (NULLs kept): the two lists pair up row by row.
        return [(self.y_alias, "list"), (self.x_alias, "list")]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        ys, xs = _arr(outs[0]), _arr(outs[1])
        parents = np.asarray(pc.list_parent_indices(ys))
        x, y, ok = self._pairs(_arr(pc.list_flatten(ys)), _arr(pc.list_flatten(xs)))
        return _pair_moments(parents[ok], x[ok], y[ok], len(ys))

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        assert self.input is not None and self.input2 is not None
        x, y, ok = self._pairs(_arr(batch.column(self.input)), _arr(batch.column(self.input2)))
        if ok.all():
            return _pair_moments(gid, x, y, n_groups, group_sizes(gid, n_groups, sizes))
        return _pair_moments(gid[ok], x[ok], y[ok], n_groups)

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        n, mx, my, m2x, m2y, cxy = _unpack(part)
        live = n > 0
        total = np.bincount(gid, weights=n, minlength=n_groups)
        g_live = gid[live]
        with np.errstate(invalid="ignore", divide="ignore"):
            means = []
            for m, m2 in ((mx, m2x), (my, m2y)):
                g_m = np.bincount(gid, weights=np.where(live, n * m, 0.0), minlength=n_groups)
                g_m = np.where(total > 0, g_m / total, 0.0)
                means.append(_anchor(g_live, n_groups, m[live], g_m, m2[live]))
            dx, dy = mx - means[0][gid], my - means[1][gid]

            def add(base: np.ndarray, extra: np.ndarray) -> np.ndarray:
                w = np.where(live, base + n * extra, 0.0)
                return np.bincount(gid, weights=w, minlength=n_groups).astype(np.float64)

            out = [add(m2x, dx * dx), add(m2y, dy * dy), add(cxy, dx * dy)]
        return [pa.array(np.rint(total).astype(np.int64))] + [
            pa.array(a, pa.float64()) for a in (*means, *out)
        ]

    def merge(self, slots: np.ndarray, part: Part) -> None:
        nb, mxb, myb, m2xb, m2yb, cb = _unpack(part)
        na = self.cols[0].values[slots].astype(np.float64)
        mxa, mya, m2xa, m2ya, ca = (c.values[slots] for c in self.cols[1:])
        n = na + nb
        first, none = na == 0, nb == 0
        with np.errstate(invalid="ignore", divide="ignore"):
            # Two partials of one same value (one left by a retraction's rounding) stay a
            # spread of 0 about the fresh, exact value.
            same_x = (m2xa == 0) & (m2xb == 0) & (np.abs(mxb - mxa) <= _ROUNDING * np.abs(mxb))
            same_y = (m2ya == 0) & (m2yb == 0) & (np.abs(myb - mya) <= _ROUNDING * np.abs(myb))
            dx = np.where(same_x, 0.0, mxb - mxa)
            dy = np.where(same_y, 0.0, myb - mya)
            ratio = np.where(n > 0, nb / n, 0.0)
            w = na * ratio

            def pick(a: np.ndarray, b: np.ndarray, both: np.ndarray) -> np.ndarray:
                return np.where(first, b, np.where(none, a, both))

            mx = pick(mxa, mxb, np.where(same_x, mxb, mxa + dx * ratio))
            my = pick(mya, myb, np.where(same_y, myb, mya + dy * ratio))
            m2x = pick(m2xa, m2xb, m2xa + m2xb + dx * dx * w)
            m2y = pick(m2ya, m2yb, m2ya + m2yb + dy * dy * w)
            c = pick(ca, cb, ca + cb + dx * dy * w)
        self.cols[0].values[slots] = np.rint(n).astype(np.int64)
        for col, v in zip(self.cols[1:], (mx, my, m2x, m2y, c)):
            col.values[slots] = v

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        """The bivariate Chan update solved for what was there before ``part`` merged (as
        :meth:`_Moments.retract`); a spread below the subtraction's rounding is 0."""
        nb, mxb, myb, m2xb, m2yb, cb = _unpack(part)
        if not all(np.isfinite(a).all() for a in (mxb, myb, m2xb, m2yb, cb)):
            return False  # a NaN or an infinity cannot be subtracted back out
        n = self.cols[0].values[slots].astype(np.float64)
        mx, my, m2x, m2y, c = (col.values[slots] for col in self.cols[1:])
        na = n - nb
        live = na > 0
        some = nb > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            safe = np.where(live, na, 1.0)
            w = na * nb / np.where(n > 0, n, 1.0)
            mxa = np.where(some, (n * mx - nb * mxb) / safe, mx)
            mya = np.where(some, (n * my - nb * myb) / safe, my)
            dx, dy = mxb - mxa, myb - mya
            m2xa = np.where(some, m2x - m2xb - dx * dx * w, m2x)
            m2ya = np.where(some, m2y - m2yb - dy * dy * w, m2y)
            ca = np.where(some, c - cb - dx * dy * w, c)
            nx = _ROUNDING * (m2x + np.abs(dx) * (n * np.abs(mx) + nb * np.abs(mxb)) * nb / safe)
            ny = _ROUNDING * (m2y + np.abs(dy) * (n * np.abs(my) + nb * np.abs(myb)) * nb / safe)
        flat_x = (na <= 1) | (m2xa <= nx)
        flat_y = (na <= 1) | (m2ya <= ny)
        m2xa = np.where(flat_x, 0.0, m2xa)
        m2ya = np.where(flat_y, 0.0, m2ya)
        ca = np.where(flat_x | flat_y, 0.0, ca)  # |Cxy| <= sqrt(M2x M2y)
        self.cols[0].values[slots] = np.rint(np.maximum(na, 0)).astype(np.int64)
        for col, v in zip(self.cols[1:], (mxa, mya, m2xa, m2ya, ca)):
            col.values[slots] = np.where(live, v, 0.0)
        return True

    def final(self, slots: np.ndarray) -> pa.Array:
        n = self.cols[0].values[slots]
        mx, my, m2x, m2y, c = (col.values[slots] for col in self.cols[1:])
        # A mean of two or more values with an infinity among them is NaN, whatever order
        # the partials merged in (inf - inf in between, as in DataFusion's running update).
        mx = np.where((n > 1) & ~np.isfinite(mx), np.nan, mx)
        my = np.where((n > 1) & ~np.isfinite(my), np.nan, my)
        with np.errstate(invalid="ignore", divide="ignore"):
            value, ok = self.statistic(CoSums(n.astype(np.float64), mx, my, m2x, m2y, c))
        if pa.types.is_integer(self.out_type):
            return pa.array(value.astype(np.int64), pa.int64())
        return from_numpy(np.where(ok, value, 0.0), ok, pa.float64())

    def statistic(self, m: CoSums) -> Final:
        """(value, valid) of the function from the co-moments of each slot."""
        raise NotImplementedError


def _slope(m: CoSums) -> Final:
    return m.c / m.m2x, (m.n > 1) & (m.m2x != 0)


@register_function
class Corr(_CoMoments):
    """Cxy / sqrt(M2x M2y); NULL when n < 2 or a spread is 0 or NaN (a NaN input), as in
    DataFusion (DuckDB answers NaN)."""

    func = "corr"

    def statistic(self, m: CoSums) -> Final:
        return m.c / np.sqrt(m.m2x * m.m2y), (m.n > 1) & (m.m2x > 0) & (m.m2y > 0)


@register_function
class CovarSamp(_CoMoments):
    """Cxy / (n - 1); NULL when n < 2."""

    func = "covar_samp"

    def statistic(self, m: CoSums) -> Final:
        return m.c / (m.n - 1), m.n > 1


@register_function
class CovarPop(_CoMoments):
    """Cxy / n; NULL when n = 0."""

    func = "covar_pop"

    def statistic(self, m: CoSums) -> Final:
        return m.c / m.n, m.n > 0


@register_function
class RegrSlope(_CoMoments):
    """Cxy / M2x; NULL when n < 2 or M2x = 0 (DuckDB answers NaN for M2x = 0)."""

    func = "regr_slope"

    def statistic(self, m: CoSums) -> Final:
        return _slope(m)


@register_function
class RegrIntercept(_CoMoments):
    """mean_y - slope * mean_x; NULL when the slope is."""

    func = "regr_intercept"

    def statistic(self, m: CoSums) -> Final:
        slope, ok = _slope(m)
        return m.my - slope * m.mx, ok


@register_function
class RegrR2(_CoMoments):
    """Cxy² / (M2x M2y); NULL when n < 2, M2x = 0 or M2y = 0, as in DataFusion (the SQL
    standard, and DuckDB, answer 1 for M2y = 0 < M2x)."""

    func = "regr_r2"

    def statistic(self, m: CoSums) -> Final:
        return m.c * m.c / (m.m2x * m.m2y), (m.n > 1) & (m.m2x != 0) & (m.m2y != 0)


@register_function
class RegrCount(_CoMoments):
    """n: the rows where both arguments are non-NULL."""

    func = "regr_count"

    def statistic(self, m: CoSums) -> Final:
        return np.rint(m.n), np.ones(len(m.n), np.bool_)


def _sum_of(func: str, field: str, doc: str) -> type[Agg]:
    """A function whose result is one of the co-sums, NULL for a group without pairs."""

    def statistic(self: _CoMoments, m: CoSums) -> Final:
        return getattr(m, field), m.n > 0

    name = "".join(part.title() for part in func.split("_"))
    attrs = {"func": func, "__doc__": doc, "statistic": statistic, "__module__": __name__}
    return register_function(type(name, (_CoMoments,), attrs))


RegrAvgx = _sum_of("regr_avgx", "mx", "mean_x (of the second argument); NULL when n = 0.")
RegrAvgy = _sum_of("regr_avgy", "my", "mean_y (of the first argument); NULL when n = 0.")
RegrSxx = _sum_of("regr_sxx", "m2x", "M2x; NULL when n = 0.")
RegrSyy = _sum_of("regr_syy", "m2y", "M2y; NULL when n = 0.")
RegrSxy = _sum_of("regr_sxy", "c", "Cxy; NULL when n = 0.")


#: The co-moment functions (each also reads a changelog: agg_retract).
CO_MOMENTS: tuple[type[Agg], ...] = (
    Corr, CovarSamp, CovarPop, RegrSlope, RegrIntercept, RegrR2, RegrCount, RegrAvgx,
    RegrAvgy, RegrSxx, RegrSyy, RegrSxy,
)  # fmt: skip
