"""Aggregate functions as mergeable partial states, vectorized over groups.

Every function has a *partial* (a few Arrow columns, one row per group) and keeps one
partial per state slot in :class:`~datum_sql.engine.state.slots.SlotColumn` s:

- ``from_batch``: the partial of each group of a batch, from one Arrow hash group-by
  (:meth:`AggregateSet.batch_partials` runs it once for all functions); or
  ``fast_partial``: the same with numpy ``bincount`` / ``ufunc.at`` when every key is a
  small-span integer (ids, window numbers) and every function is count/sum/avg/min/max
  of a number — no hashing at all;
- ``merge``: combine a partial into the state of distinct slots (numpy fancy indexing);
- ``reduce``: combine partial rows that share a group id (hop windows, session merges);
- ``gather`` / ``set``: read / overwrite the partials of slots;
- ``final``: the SQL value of slots.

=================  =============================  ======================================
function           partial                        final (type)
=================  =============================  ======================================
count_star         n                              n (int64)
count              n (non-NULL inputs)            n (int64)
count_distinct     the set of (slot, value)       its size per slot (int64)
sum                s, n (non-NULL inputs)         s, NULL when n = 0 (int64 / float64 /
                                                  decimal128(38, scale))
avg                s, n                           s / n, NULL when n = 0 (float64)
min / max          v                              v (input type; NULLs skipped; NaN
                                                  above every number, as in DuckDB)
first_value        v, t, seq of the first row     v (input type; NULL values count)
last_value         v, t, seq of the last row      v
approx_percentile  the multiset of (slot, value)  exact continuous percentile (float64)
=================  =============================  ======================================

first/last order rows by (event time ``t``, arrival ``seq``): ties go to the earliest
arrival for first_value and the latest for last_value. ``approx_percentile`` is computed
exactly (linear interpolation between closest ranks, as ``percentile_cont`` /
DuckDB ``quantile_cont``, by :mod:`datum_sql.engine.percentile`, which ``ctx.sql`` calls
too); its state keeps every non-NULL value, so it is the one
aggregate whose state grows with the input.
"""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from datum_sql.engine.arrays import one_array
from datum_sql.engine.percentile import as_float64, check_q, interpolate
from datum_sql.engine.state.keys import Coder, direct_groups
from datum_sql.engine.state.slots import SlotColumn, from_numpy, numpy_dtype, to_numpy
from datum_sql.errors import PlanError

Part = list[pa.Array]
_MASK32 = np.int64(0xFFFFFFFF)


def _arr(x: pa.Array | pa.ChunkedArray) -> pa.Array:
    return one_array(x)


def _idx(x: np.ndarray) -> pa.Array:
    return pa.array(x, pa.int64())


def group_reduce(arr: pa.Array, gid: np.ndarray, n_groups: int, op: str) -> pa.Array:
    """``op`` (sum, min, max) of ``arr`` per dense group id; NULL where a group has no value."""
    if numpy_dtype(arr.type) is not None:
        v, ok = to_numpy(arr)
        g, vv = (gid, v) if ok.all() else (gid[ok], v[ok])
        has = np.zeros(n_groups, np.bool_)
        has[g] = True
        if op == "sum":
            out = np.zeros(n_groups, v.dtype)
            np.add.at(out, g, vv)
        else:
            out = np.zeros(n_groups, v.dtype)
            out[g] = vv  # any value of the group as the start
            with np.errstate(invalid="ignore"):
                extreme_into(op, out, g, vv)
        return from_numpy(out, has, arr.type)
    table = pa.table({"g": pa.array(gid, pa.int64()), "v": arr})
    res = table.group_by("g", use_threads=False).aggregate([("v", op)])
    out = pa.nulls(n_groups, arr.type)
    order = np.asarray(res.column("g"))
    vals = _arr(res.column(f"v_{op}"))
    pos = np.full(n_groups, -1, np.int64)
    pos[order] = np.arange(len(order))
    if len(order) == n_groups:
        return vals.take(_idx(pos)).cast(arr.type)
    both = pa.concat_arrays([vals.cast(arr.type), out.slice(0, 1)])
    pos[pos < 0] = len(vals)
    return both.take(_idx(pos))


def group_sizes(gid: np.ndarray, n_groups: int, sizes: np.ndarray | None) -> np.ndarray:
    """The rows of each dense group id: ``sizes`` when the grouping counted them already,
    else one ``bincount``."""
    if sizes is not None:
        return sizes
    return np.bincount(gid, minlength=n_groups).astype(np.int64, copy=False)


def _extreme_ufunc(op: str, dtype: np.dtype) -> np.ufunc:
    """min/max with SQL's (DuckDB's) NaN order: NaN is above every number, so max
    returns NaN when a NaN is present and min skips NaN unless every value is NaN."""
    if op == "min":
        return np.fmin if dtype.kind == "f" else np.minimum
    return np.maximum  # propagates NaN


def extreme_into(op: str, out: np.ndarray, gid: np.ndarray, v: np.ndarray) -> None:
    """``out[g] = op(out[g], op of the values v of group g)``: one reduction per run of
    equal ids when the ids never decrease (windows and keys in time order: most batches
    of a window meet one or two), an unbuffered ``ufunc.at`` otherwise."""
    f = _extreme_ufunc(op, v.dtype)
    if len(gid) == 0:
        return
    if len(out) == 1:
        out[0] = f(out[0], f.reduce(v))
        return
    # ids numbered in key order run 0 .. n-1 when they never decrease: a cheap first test
    rising = gid[0] == 0 and gid[-1] == len(out) - 1
    if rising and len(gid) > 1 and bool((gid[1:] >= gid[:-1]).all()):
        starts = np.flatnonzero(np.concatenate([[True], gid[1:] != gid[:-1]]))
        at = gid[starts]
        out[at] = f(out[at], f.reduceat(v, starts))
        return
    f.at(out, gid, v)


def _differs(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Row-wise: a and b differ (NULL = NULL and NaN = NaN count as equal)."""
    if pa.types.is_list(a.type):
        return _lists_differ(a, b)
    ne = np.asarray(pc.fill_null(pc.not_equal(a, b), True))
    same = np.asarray(a.is_null()) & np.asarray(b.is_null())
    if pa.types.is_floating(a.type):
        same |= np.asarray(pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    return ne & ~same


def _lists_differ(a: pa.Array, b: pa.Array) -> np.ndarray:
    """Row-wise for list arrays: NULL-ness, length or any element differs."""
    a_null, b_null = np.asarray(a.is_null()), np.asarray(b.is_null())
    a_len = np.asarray(pc.fill_null(pc.list_value_length(a), 0))
    b_len = np.asarray(pc.fill_null(pc.list_value_length(b), 0))
    out = (a_null != b_null) | (a_len != b_len)
    both = np.flatnonzero(~out & ~a_null & (a_len > 0))
    if len(both):
        sub_a, sub_b = a.take(_idx(both)), b.take(_idx(both))
        elems = _differs(_arr(pc.list_flatten(sub_a)), _arr(pc.list_flatten(sub_b)))
        parents = np.asarray(pc.list_parent_indices(sub_a))
        out[both] |= np.bincount(parents[elems], minlength=len(both)) > 0
    return out


def regroup_lists(lists: pa.Array, gid: np.ndarray, n_groups: int) -> pa.Array:
    """One list per group id: the concatenation (in row order) of the lists of its rows."""
    parents = np.asarray(pc.list_parent_indices(lists))
    values = _arr(pc.list_flatten(lists))
    g = gid[parents]
    order = np.argsort(g, kind="stable")
    return lists_from_parents(values.take(_idx(order)), g[order], n_groups)


def lists_from_parents(values: pa.Array, parent: np.ndarray, n: int) -> pa.Array:
    """``n`` lists from ``values`` grouped by their (sorted) ``parent`` index."""
    sizes = np.bincount(parent, minlength=n)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


class Agg:
    """One aggregate call: ``func(input) AS output``, its state and its partials."""

    func = ""
    #: The operator holding the call, named by the failures of Python aggregates.
    operator = ""
    #: The input columns the function reads: 2 for ``corr(y, x)``, ``regr_*(y, x)``
    #: (``input``, then ``input2``).
    arity = 1

    def __init__(
        self,
        idx: int,
        spec: dict[str, Any],
        in_type: pa.DataType | None,
        out_type: pa.DataType,
        in_type2: pa.DataType | None = None,
    ) -> None:
        self.idx = idx
        self.input: str | None = spec.get("input")
        #: The second argument's column (a two-input function only).
        self.input2: str | None = spec.get("input2")
        self.output: str = spec["output"]
        self.params: dict[str, Any] = spec.get("params") or {}
        self.in_type = in_type
        self.in_type2 = in_type2
        self.out_type = out_type
        self.alias = f"__a{idx}"
        self.cols: list[SlotColumn] = []
        #: The batch partial can be computed by :meth:`fast_partial` (numpy, no hashing).
        self.fast = False

    # -- the batch partial ------------------------------------------------------------
    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        assert self.input is not None
        return {self.alias: batch.column(self.input)}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def spec_names(self) -> list[str]:
        return [f"{s[0]}_{s[1]}" for s in self.batch_specs()]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        return outs

    #: :meth:`fast_partial` also takes ids of groups without rows (their partials are
    #: dropped after): the grouping then skips renumbering its groups densely.
    sparse_ids = False

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        """The batch partial from dense group ids (only when :attr:`fast`); ``sizes``, when
        the grouping counted them, the rows of each group (see :func:`group_sizes`)."""
        raise NotImplementedError

    # -- partial algebra --------------------------------------------------------------
    def take(self, part: Part, idx: np.ndarray) -> Part:
        ix = _idx(idx)
        return [a.take(ix) for a in part]

    def concat(self, parts: list[Part]) -> Part:
        return [pa.concat_arrays([p[j] for p in parts]) for j in range(len(parts[0]))]

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        raise NotImplementedError

    # -- state ------------------------------------------------------------------------
    def grow(self, n: int) -> None:
        for c in self.cols:
            c.grow(n)

    def compact(self, keep: np.ndarray, remap: np.ndarray) -> None:
        for c in self.cols:
            c.compact(keep)

    def gather(self, slots: np.ndarray) -> Part:
        return [c.gather(slots) for c in self.cols]

    def set(self, slots: np.ndarray, part: Part) -> None:
        for c, a in zip(self.cols, part):
            c.set(slots, a)

    def merge(self, slots: np.ndarray, part: Part) -> None:
        raise NotImplementedError

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        """Undo ``merge`` of ``part`` (the partial of rows a changelog retracts) in distinct
        ``slots``; False when the state cannot (a value that was never added, a NaN or an
        infinity that arithmetic cannot take back out)."""
        raise NotImplementedError

    def reset(self, slots: np.ndarray) -> None:
        """Make ``slots`` hold the state of no rows (a group whose rows all left)."""
        for c in self.cols:
            c.reset(slots)

    def final(self, slots: np.ndarray) -> pa.Array:
        raise NotImplementedError

    def state_arrays(self) -> list[pa.Array]:
        return [c.to_arrow() for c in self.cols]

    def load(self, arrays: list[pa.Array], tables: dict[str, pa.Table], n_slots: int) -> None:
        for c, a in zip(self.cols, arrays):
            c.load(a)

    def extra_tables(self) -> dict[str, pa.Table]:
        return {}

    def extra_rows(self) -> int:
        return 0

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.cols)


class _Additive(Agg):
    """Partials that add up: every column is summed on merge and reduce."""

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        return [group_reduce(a, gid, n_groups, "sum") for a in part]

    def merge(self, slots: np.ndarray, part: Part) -> None:
        for c, a in zip(self.cols, part):
            if c.is_numpy:
                v, _ = to_numpy(a)
                c.values[slots] += v
            else:
                c.set(slots, _decimal_add(c.gather(slots), a, c.type))

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        for c, a in zip(self.cols, part):
            if c.is_numpy:
                v, _ = to_numpy(a)
                if v.dtype.kind == "f" and not np.isfinite(v).all():
                    return False  # inf - inf is NaN, not what is left
                c.values[slots] -= v
            else:
                c.set(slots, _decimal_add(c.gather(slots), a, c.type, pc.subtract))
        return True


def _decimal_add(a: pa.Array, b: pa.Array, t: pa.DataType, op: Any = pc.add) -> pa.Array:
    wide = pa.decimal256(39, t.scale)  # one more digit than decimal128 can hold
    return op(a.cast(wide), b.cast(wide)).cast(t)


class CountStar(_Additive):
    func = "count_star"
    sparse_ids = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.cols = [SlotColumn(pa.int64(), 0)]
        self.fast = True

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        return {self.alias: seq}

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        return [pa.array(group_sizes(gid, n_groups, sizes))]

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [(self.alias, "count", pc.CountOptions(mode="all"))]

    def final(self, slots: np.ndarray) -> pa.Array:
        return pa.array(self.cols[0].values[slots], pa.int64())


class Count(CountStar):
    func = "count"

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        return Agg.batch_inputs(self, batch, t, seq)

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [(self.alias, "count", pc.CountOptions(mode="only_valid"))]

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        col = _arr(batch.column(self.input))
        if col.null_count == 0:
            return super().fast_partial(batch, gid, n_groups, sizes)
        ok = np.asarray(col.is_valid())
        return [pa.array(np.bincount(gid[ok], minlength=n_groups).astype(np.int64))]


def _numeric(t: pa.DataType | None) -> bool:
    return (
        t is not None and (pa.types.is_integer(t) or pa.types.is_floating(t)) and t != pa.uint64()
    )


def _sum_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_decimal(t):
        return pa.decimal128(38, t.scale)
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return pa.int64()
    raise PlanError(f"sum/avg of {t} is not supported; cast the column to a number")


class Sum(_Additive):
    func = "sum"
    sparse_ids = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.in_type is not None
        self.sum_type = _sum_type(self.in_type)
        zero: Any = decimal.Decimal(0) if pa.types.is_decimal(self.sum_type) else 0
        self.cols = [SlotColumn(self.sum_type, zero), SlotColumn(pa.int64(), 0)]
        self.fast = _numeric(self.in_type) and numpy_dtype(self.in_type) is not None  # type: ignore[arg-type]

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        col = _arr(batch.column(self.input))
        v, ok = to_numpy(col)
        all_ok = col.null_count == 0
        count = group_sizes(gid if all_ok else gid[ok], n_groups, sizes if all_ok else None)
        if v.dtype.kind == "f":
            total = np.bincount(gid, weights=v, minlength=n_groups)
            return [pa.array(total, pa.float64()), pa.array(count)]
        v = v.astype(np.int64, copy=False)
        lo, hi = (int(v.min()), int(v.max())) if len(v) else (0, 0)
        if max(abs(lo), abs(hi)) * len(v) < 2**53:  # float64 sums of these are exact
            total = np.rint(np.bincount(gid, weights=v, minlength=n_groups)).astype(np.int64)
        else:
            total = np.zeros(n_groups, np.int64)
            np.add.at(total, gid, v)
        return [pa.array(total, pa.int64()), pa.array(count)]

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        col = _arr(batch.column(self.input))
        if pa.types.is_boolean(col.type) or pa.types.is_integer(col.type):
            col = col.cast(pa.int64(), safe=False)
        elif pa.types.is_floating(col.type):
            col = col.cast(pa.float64())
        return {self.alias: col}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [
            (self.alias, "sum", pc.ScalarAggregateOptions(min_count=0)),
            (self.alias, "count", pc.CountOptions(mode="only_valid")),
        ]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        s = _arr(outs[0]).fill_null(0) if outs[0].null_count else _arr(outs[0])
        return [s.cast(self.sum_type, safe=False), _arr(outs[1])]

    def _sum_and_count(self, slots: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        s, n = self.cols
        return s.gather(slots), n.values[slots]

    def final(self, slots: np.ndarray) -> pa.Array:
        s, n = self.cols
        count = n.values[slots]
        if s.is_numpy:
            return from_numpy(s.values[slots], count > 0, self.sum_type)
        return pc.if_else(pa.array(count > 0), s.gather(slots), pa.nulls(len(slots), s.type))


class Avg(Sum):
    func = "avg"

    def final(self, slots: np.ndarray) -> pa.Array:
        s, n = self.cols
        count = n.values[slots]
        if s.is_numpy:
            total = s.values[slots].astype(np.float64)
        else:
            total = np.asarray(s.gather(slots).cast(pa.float64()))
        ok = count > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total / np.where(ok, count, 1)
        return from_numpy(mean, ok, pa.float64())


class _Extreme(Agg):
    op = "min"
    sparse_ids = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.in_type is not None
        self.cols = [SlotColumn(self.in_type)]
        self.fast = _numeric(self.in_type)

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        col = _arr(batch.column(self.input))
        if self.op == "max" and pa.types.is_floating(col.type):  # Arrow's max skips NaN
            return {self.alias: col, f"__nan{self.idx}": pc.is_nan(col)}
        return {self.alias: col}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        specs: list[tuple[Any, ...]] = [(self.alias, self.op)]
        if self.op == "max" and pa.types.is_floating(self.in_type):
            specs.append((f"__nan{self.idx}", "any"))
        return specs

    def from_batch(self, outs: list[pa.Array]) -> Part:
        v = outs[0]
        if len(outs) > 1 and pc.any(outs[1]).as_py():
            v = pc.if_else(pc.fill_null(outs[1], False), pa.scalar(float("nan"), v.type), v)
        return [v.cast(self.in_type)]

    def fast_partial(
        self, batch: pa.Table, gid: np.ndarray, n_groups: int, sizes: np.ndarray | None = None
    ) -> Part:
        col = _arr(batch.column(self.input))
        v, ok = to_numpy(col)
        if v.dtype.kind in "iu" and col.null_count == 0:
            # every group has a row: start from the identity, one pass, no mask
            info = np.iinfo(v.dtype)
            out = np.full(n_groups, info.max if self.op == "min" else info.min, v.dtype)
            extreme_into(self.op, out, gid, v)
            return [from_numpy(out, None, self.in_type)]  # type: ignore[arg-type]
        g, vv = (gid, v) if ok.all() else (gid[ok], v[ok])
        out = np.zeros(n_groups, v.dtype)
        has = np.zeros(n_groups, np.bool_)
        has[g] = True
        out[g] = vv  # any value of the group as the start
        with np.errstate(invalid="ignore"):
            extreme_into(self.op, out, g, vv)
        return [from_numpy(out, has, self.in_type)]  # type: ignore[arg-type]

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        return [group_reduce(part[0], gid, n_groups, self.op)]

    def merge(self, slots: np.ndarray, part: Part) -> None:
        c = self.cols[0]
        if c.is_numpy:
            new, new_ok = to_numpy(part[0])
            old, old_ok = c.values[slots], c.valid[slots]
            better = new < old if self.op == "min" else new > old
            if new.dtype.kind == "f":  # NaN above every number (see _extreme_ufunc)
                if self.op == "min":
                    better |= np.isnan(old) & ~np.isnan(new)
                else:
                    better |= np.isnan(new)
            win = new_ok & (~old_ok | better)
            ws = slots[win]
            c.values[ws] = new[win]
            c.valid[ws] = True
            return
        old = c.gather(slots)
        new = part[0]
        cmp = pc.less(new, old) if self.op == "min" else pc.greater(new, old)
        win = pc.and_(new.is_valid(), pc.or_(old.is_null(), pc.fill_null(cmp, False)))
        c.set(slots, pc.if_else(win, new, old))

    def final(self, slots: np.ndarray) -> pa.Array:
        return self.cols[0].gather(slots)


class Min(_Extreme):
    func = "min"
    op = "min"


class Max(_Extreme):
    func = "max"
    op = "max"


class BoolAnd(Min):
    """``bool_and``: the minimum of booleans (false below true), NULLs skipped."""

    func = "bool_and"


class BoolOr(Max):
    """``bool_or``: the maximum of booleans, NULLs skipped."""

    func = "bool_or"


class FirstValue(Agg):
    """(v, t, seq) of the row with the least (t, seq); NULL values are values."""

    func = "first_value"
    pick = "first"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.in_type is not None
        self.cols = [SlotColumn(self.in_type), SlotColumn(pa.int64()), SlotColumn(pa.int64())]
        self.t_alias, self.s_alias = f"__t{self.idx}", f"__s{self.idx}"

    def batch_inputs(self, batch: pa.Table, t: pa.Array, seq: pa.Array) -> dict[str, pa.Array]:
        return {self.alias: batch.column(self.input), self.t_alias: t, self.s_alias: seq}

    def batch_specs(self) -> list[tuple[Any, ...]]:
        keep_nulls = pc.ScalarAggregateOptions(skip_nulls=False)
        return [
            (self.alias, self.pick, keep_nulls),
            (self.t_alias, self.pick, keep_nulls),
            (self.s_alias, self.pick, keep_nulls),
        ]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        return [_arr(outs[0]).cast(self.in_type), _arr(outs[1]), _arr(outs[2])]

    def _wins(self, t_new: np.ndarray, s_new: np.ndarray, t_old: np.ndarray, s_old: np.ndarray):
        if self.pick == "first":
            return (t_new < t_old) | ((t_new == t_old) & (s_new < s_old))
        return (t_new > t_old) | ((t_new == t_old) & (s_new > s_old))

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        t, _ = to_numpy(part[1])
        s, _ = to_numpy(part[2])
        order = np.lexsort((s, t, gid))
        g = gid[order]
        if self.pick == "first":
            edge = np.r_[True, g[1:] != g[:-1]]
        else:
            edge = np.r_[g[1:] != g[:-1], True]
        return self.take(part, order[edge])

    def merge(self, slots: np.ndarray, part: Part) -> None:
        v, t, s = self.cols
        t_new, _ = to_numpy(part[1])
        s_new, _ = to_numpy(part[2])
        win = ~t.valid[slots] | self._wins(t_new, s_new, t.values[slots], s.values[slots])
        ws = slots[win]
        if len(ws) == 0:
            return
        v.set(ws, part[0].filter(pa.array(win)) if not win.all() else part[0])
        t.values[ws] = t_new[win]
        t.valid[ws] = True
        s.values[ws] = s_new[win]
        s.valid[ws] = True

    def final(self, slots: np.ndarray) -> pa.Array:
        return self.cols[0].gather(slots)


class LastValue(FirstValue):
    func = "last_value"
    pick = "last"


class _ValueSet:
    """The (slot, value) pairs of count_distinct / approx_percentile.

    Values are coded exactly by a :class:`Coder` (the values themselves are kept once,
    in code order); a pair is the int64 ``slot << 32 | code``, held sorted. ``multi``
    keeps a multiplicity per pair (a multiset) instead of a set. ``count`` is the number of
    values of each slot (copies included), ``kinds`` the number of distinct ones.
    """

    def __init__(self, value_type: pa.DataType, multi: bool) -> None:
        self.type = value_type
        self.multi = multi
        self._reset_values()
        self.pairs = np.empty(0, np.int64)
        self.mult = np.empty(0, np.int64)
        self.count = SlotColumn(pa.int64(), 0)
        self.kinds = SlotColumn(pa.int64(), 0)

    def grow(self, n: int) -> None:
        self.count.grow(n)
        self.kinds.grow(n)

    def _reset_values(self) -> None:
        self.coder = Coder(self.type)
        self._chunks: list[pa.Array] = []
        self._values: pa.Array | None = None

    def values(self) -> pa.Array:
        if self._values is None:
            self._values = (
                pa.concat_arrays(self._chunks) if self._chunks else pa.array([], self.type)
            )
            self._chunks = [self._values]
        return self._values

    def add(self, slots: np.ndarray, values: pa.Array) -> None:
        """Add pairs (``slots[i]``, ``values[i]``); NULL values are skipped."""
        if len(values) == 0:
            return
        if values.null_count:
            ok = np.asarray(values.is_valid())
            slots, values = slots[ok], values.filter(pa.array(ok))
        codes, new_rows = self.coder.encode(values)
        if len(new_rows):
            self._chunks.append(values.take(_idx(new_rows)))
            self._values = None
        keys = (slots.astype(np.int64) << 32) | codes
        if self.multi:
            uniq, counts = np.unique(keys, return_counts=True)
        else:
            uniq = np.unique(keys)
            counts = np.ones(len(uniq), np.int64)
        pos = np.searchsorted(self.pairs, uniq)
        if len(self.pairs):
            present = self.pairs[np.minimum(pos, len(self.pairs) - 1)] == uniq
        else:
            present = np.zeros(len(uniq), np.bool_)
        if self.multi and present.any():
            self.mult[pos[present]] += counts[present]
        fresh = ~present
        if fresh.any():
            self.pairs = np.insert(self.pairs, pos[fresh], uniq[fresh])
            if self.multi:
                self.mult = np.insert(self.mult, pos[fresh], counts[fresh])
        added = counts if self.multi else fresh.astype(np.int64)
        np.add.at(self.count.values, uniq >> 32, added)
        np.add.at(self.kinds.values, uniq >> 32, fresh.astype(np.int64))

    def remove(self, slots: np.ndarray, values: pa.Array) -> bool:
        """Remove one copy of each pair (``slots[i]``, ``values[i]``) of a multiset; NULL
        values are skipped. False (and nothing removed) when a pair has fewer copies."""
        assert self.multi
        if len(values) == 0:
            return True
        if values.null_count:
            ok = np.asarray(values.is_valid())
            slots, values = slots[ok], values.filter(pa.array(ok))
            if len(values) == 0:
                return True
        codes, new_rows = self.coder.encode(values)
        if len(new_rows):  # values never seen: kept coded, so the coder stays aligned
            self._chunks.append(values.take(_idx(new_rows)))
            self._values = None
        uniq, counts = np.unique((slots.astype(np.int64) << 32) | codes, return_counts=True)
        pos = np.searchsorted(self.pairs, uniq)
        found = np.minimum(pos, max(len(self.pairs) - 1, 0))
        if len(self.pairs) == 0 or not (self.pairs[found] == uniq).all():
            return False
        if (self.mult[pos] < counts).any():
            return False
        self.mult[pos] -= counts
        np.add.at(self.count.values, uniq >> 32, -counts)
        gone = pos[self.mult[pos] == 0]
        if len(gone):
            np.add.at(self.kinds.values, self.pairs[gone] >> 32, -1)
            self.pairs = np.delete(self.pairs, gone)
            self.mult = np.delete(self.mult, gone)
        return True

    def compact(self, keep: np.ndarray, remap: np.ndarray) -> None:
        self.count.compact(keep)
        self.kinds.compact(keep)
        slot = self.pairs >> 32
        new = remap[slot]
        live = new >= 0
        self.pairs = (new[live] << 32) | (self.pairs[live] & _MASK32)
        if self.multi:
            self.mult = self.mult[live]
        self._collect()

    def _collect(self) -> None:
        """Forget values no pair uses any more (keeps memory flat under purges)."""
        codes = self.pairs & _MASK32
        if self.coder.n <= 2 * len(self.pairs) + 4096:
            return
        live = np.unique(codes)
        vals = self.values().take(_idx(live))
        self._reset_values()
        if len(vals):
            _, rows = self.coder.encode(vals)
            self._chunks = [vals.take(_idx(rows))]
        slot = self.pairs >> 32
        order = np.lexsort((np.searchsorted(live, codes), slot))
        self.pairs = (slot << 32 | np.searchsorted(live, codes))[order]
        if self.multi:
            self.mult = self.mult[order]

    def select(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``slots``, index into pairs) of every pair of the distinct ``slots``."""
        pos_of = np.full(self.count.n, -1, np.int64)
        pos_of[slots] = np.arange(len(slots))
        pos = pos_of[self.pairs >> 32]
        sel = np.flatnonzero(pos >= 0)
        return pos[sel], sel

    def distinct_values(self, slots: np.ndarray) -> tuple[np.ndarray, pa.Array]:
        """(position in ``slots``, value) of every distinct value of the distinct ``slots``."""
        pos, sel = self.select(slots)
        return pos, self.values().take(_idx(self.pairs[sel] & _MASK32))

    def gather(self, slots: np.ndarray) -> pa.Array:
        """One list of values per slot (repeated by multiplicity)."""
        pos, sel = self.select(slots)
        order = np.argsort(pos, kind="stable")
        pos, sel = pos[order], sel[order]
        reps = self.mult[sel] if self.multi else np.ones(len(sel), np.int64)
        codes = np.repeat(self.pairs[sel] & _MASK32, reps)
        sizes = np.bincount(np.repeat(pos, reps), minlength=len(slots))
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), self.values().take(_idx(codes)))

    def replace(self, slots: np.ndarray, lists: pa.Array) -> None:
        mark = np.zeros(self.count.n, np.bool_)
        mark[slots] = True
        keep = ~mark[self.pairs >> 32]
        self.pairs = self.pairs[keep]
        if self.multi:
            self.mult = self.mult[keep]
        self.count.values[slots] = 0
        self.kinds.values[slots] = 0
        parents = np.asarray(pc.list_parent_indices(lists))
        self.add(slots[parents], _arr(pc.list_flatten(lists)))

    def table(self) -> pa.Table:
        cols = {
            "slot": pa.array(self.pairs >> 32, pa.int64()),
            "value": self.values().take(_idx(self.pairs & _MASK32)),
        }
        if self.multi:
            cols["mult"] = pa.array(self.mult, pa.int64())
        return pa.table(cols)

    def load(self, table: pa.Table, n_slots: int) -> None:
        self._reset_values()
        self.pairs = np.empty(0, np.int64)
        self.mult = np.empty(0, np.int64)
        self.count = SlotColumn(pa.int64(), 0)
        self.kinds = SlotColumn(pa.int64(), 0)
        self.grow(n_slots)
        if table.num_rows == 0:
            return
        slots = np.asarray(table.column("slot"))
        values = _arr(table.column("value"))
        if self.multi:
            slots = np.repeat(slots, np.asarray(table.column("mult")))
            values = values.take(_idx(np.repeat(np.arange(len(values)), table.column("mult"))))
        self.add(slots, values)

    @property
    def nbytes(self) -> int:
        sizes = self.pairs.nbytes + self.mult.nbytes + self.count.nbytes + self.kinds.nbytes
        return int(sizes + self.values().nbytes)


class CountDistinct(Agg):
    """Partial = the list of distinct non-NULL values per group; state = a value set."""

    func = "count_distinct"
    multi = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        assert self.in_type is not None
        self.set_ = _ValueSet(self.value_type(), self.multi)

    def value_type(self) -> pa.DataType:
        """The type of the values the set holds: the input's."""
        assert self.in_type is not None
        return self.in_type

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [(self.alias, "distinct", pc.CountOptions(mode="only_valid"))]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        return [_arr(outs[0])]

    def reduce(self, part: Part, gid: np.ndarray, n_groups: int) -> Part:
        return [regroup_lists(part[0], gid, n_groups)]

    def grow(self, n: int) -> None:
        self.set_.grow(n)

    def compact(self, keep: np.ndarray, remap: np.ndarray) -> None:
        self.set_.compact(keep, remap)

    def gather(self, slots: np.ndarray) -> Part:
        return [self.set_.gather(slots)]

    def set(self, slots: np.ndarray, part: Part) -> None:
        self.set_.replace(slots, part[0])

    def merge(self, slots: np.ndarray, part: Part) -> None:
        lists = part[0]
        parents = np.asarray(pc.list_parent_indices(lists))
        self.set_.add(slots[parents], _arr(pc.list_flatten(lists)))

    def retract(self, slots: np.ndarray, part: Part) -> bool:
        lists = part[0]
        parents = np.asarray(pc.list_parent_indices(lists))
        return self.set_.remove(slots[parents], _arr(pc.list_flatten(lists)))

    def final(self, slots: np.ndarray) -> pa.Array:
        return pa.array(self.set_.kinds.values[slots], pa.int64())

    def state_arrays(self) -> list[pa.Array]:
        return []

    def extra_tables(self) -> dict[str, pa.Table]:
        return {f"values{self.idx}": self.set_.table()}

    def load(self, arrays: list[pa.Array], tables: dict[str, pa.Table], n_slots: int) -> None:
        self.set_.load(tables[f"values{self.idx}"], n_slots)

    def extra_rows(self) -> int:
        return len(self.set_.pairs)

    @property
    def nbytes(self) -> int:
        return self.set_.nbytes


class ApproxPercentile(CountDistinct):
    """Exact ``percentile_cont(q)`` over the kept multiset of non-NULL values per group."""

    func = "approx_percentile"
    multi = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        q = self.params.get("q", self.params.get("percentile", 0.5))
        self.q = check_q(q)
        if numpy_dtype(self.in_type) is None and not pa.types.is_decimal(self.in_type):  # type: ignore[arg-type]
            raise PlanError(f"approx_percentile of {self.in_type} is not supported")

    def batch_specs(self) -> list[tuple[Any, ...]]:
        return [(self.alias, "list")]

    def from_batch(self, outs: list[pa.Array]) -> Part:
        lists = _arr(outs[0])
        flat = _arr(pc.list_flatten(lists))
        if flat.null_count:  # NULLs do not count: rebuild the lists without them
            parents = np.asarray(pc.list_parent_indices(lists))
            ok = np.asarray(flat.is_valid())
            sizes = np.bincount(parents[ok], minlength=len(lists))
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
            lists = pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(ok)))
        return [lists]

    def final(self, slots: np.ndarray) -> pa.Array:
        s = self.set_
        pos, sel = s.select(slots)
        if len(sel) == 0:
            return pa.nulls(len(slots), pa.float64())
        values = as_float64(s.values().take(_idx(s.pairs[sel] & _MASK32)))
        out, has = interpolate(values, pos, len(slots), self.q, s.mult[sel])
        return from_numpy(out, has, pa.float64())


#: Function name → its class; the families in ``agg_*.py`` beside this module add theirs
#: with :func:`register_function` (the operators package imports them).
FUNCTIONS: dict[str, type[Agg]] = {
    cls.func: cls
    for cls in (
        CountStar, Count, CountDistinct, Sum, Avg, Min, Max, BoolAnd, BoolOr, FirstValue,
        LastValue, ApproxPercentile,
    )
}  # fmt: skip


def register_function(cls: type[Agg]) -> type[Agg]:
    """Class decorator: make ``cls.func`` known to :class:`AggregateSet`."""
    FUNCTIONS[cls.func] = cls
    return cls


#: Function name → the class that can also take rows back out (``retract``), for an
#: aggregate over a changelog; ``agg_retract.py`` fills it. A function missing here is
#: refused over a changelog.
RETRACTING: dict[str, type[Agg]] = {}


def register_retracting(cls: type[Agg]) -> type[Agg]:
    """Class decorator: ``cls`` computes ``cls.func`` over a changelog."""
    RETRACTING[cls.func] = cls
    return cls


def _value_type(schema: pa.Schema, column: str | None) -> pa.DataType | None:
    """The type of ``column`` (a dictionary's value type), None for no column."""
    if column is None:
        return None
    t = schema.field(column).type
    return t.value_type if pa.types.is_dictionary(t) else t


class AggregateSet:
    """The aggregate calls of one operator, sharing slots and one batch group-by.

    ``retracting``: the calls read a changelog, so each can also take rows back out
    (:meth:`retract`), and a hidden ``count(*)`` after them counts every group's rows
    (:meth:`rows`: a group whose rows all left is gone)."""

    def __init__(
        self,
        specs: list[dict[str, Any]],
        input_schema: pa.Schema,
        output_schema: pa.Schema,
        operator: str,
        *,
        retracting: bool = False,
    ) -> None:
        self.aggs: list[Agg] = []
        classes = RETRACTING if retracting else FUNCTIONS
        for i, spec in enumerate(specs):
            func = spec["func"]
            cls = classes.get(func)
            if cls is None and func in FUNCTIONS:
                raise PlanError(
                    f"{operator}: aggregate {func} cannot take rows back out, so it cannot read "
                    f"a changelog; these can: {', '.join(sorted(RETRACTING))}"
                )
            if cls is None:
                raise PlanError(
                    f"{operator}: unknown aggregate {func!r}; known: {', '.join(sorted(FUNCTIONS))}"
                )
            inp, inp2 = spec.get("input"), spec.get("input2")
            if inp is None and func != "count_star":
                raise PlanError(f"{operator}: aggregate {func} needs an input column")
            if (inp2 is not None) != (cls.arity == 2):
                raise PlanError(
                    f"{operator}: aggregate {func} takes {cls.arity} input column(s), "
                    f"got {1 + (inp2 is not None)}"
                )
            in_type, in_type2 = (_value_type(input_schema, c) for c in (inp, inp2))
            out_type = output_schema.field(spec["output"]).type
            agg = cls(i, spec, in_type, out_type, in_type2)
            agg.operator = operator
            self.aggs.append(agg)
        #: Every state the set keeps: the calls, then the row counter when retracting.
        self.members: list[Agg] = list(self.aggs)
        self.counter: CountStar | None = None
        if retracting:
            self.counter = CountStar(len(specs), {"output": "__rows"}, None, pa.int64())
            self.members.append(self.counter)
        self.ordered = any(isinstance(a, FirstValue) for a in self.aggs)
        #: A group that takes rows always changes: a ``count(*)`` among the calls, over
        #: rows that are only ever added (no retractions).
        self.counts_rows = not retracting and any(type(a) is CountStar for a in self.aggs)
        self.fast = all(a.fast for a in self.members)
        self.sparse_ids = all(a.sparse_ids for a in self.members)
        self.n = 0

    def batch_partials(
        self,
        batch: pa.Table,
        group: dict[str, pa.Array],
        t: np.ndarray,
        seq0: int,
    ) -> tuple[list[pa.Array], list[Part]]:
        """(group key columns, partial per member) of the distinct groups of ``batch``."""
        n = batch.num_rows
        if self.fast:  # small-span integer keys: direct addressing, no hash table
            direct = direct_groups(list(group.values()), n, compact=not self.sparse_ids)
            if direct is not None:
                gid, n_groups, keys, sizes, present = direct
                parts = [a.fast_partial(batch, gid, n_groups, sizes) for a in self.members]
                return keys, parts if present is None else self.take(parts, present)
        seq = pa.array(np.arange(seq0, seq0 + n, dtype=np.int64))
        t_arr = pa.array(t, pa.int64())
        cols: dict[str, pa.Array] = dict(group)
        for a in self.members:
            cols.update(a.batch_inputs(batch, t_arr, seq))
        table = pa.table(cols)
        if self.ordered and n > 1 and (np.diff(t) < 0).any():
            table = table.take(_idx(np.argsort(t, kind="stable")))
        specs = [s for a in self.members for s in a.batch_specs()]
        res = table.group_by(list(group), use_threads=False).aggregate(specs)
        keys = [_arr(res.column(g)) for g in group]
        parts = [
            a.from_batch([_arr(res.column(nm)) for nm in a.spec_names()]) for a in self.members
        ]
        return keys, parts

    def take(self, parts: list[Part], idx: np.ndarray) -> list[Part]:
        return [a.take(p, idx) for a, p in zip(self.members, parts)]

    def concat(self, parts: list[list[Part]]) -> list[Part]:
        return [a.concat([p[i] for p in parts]) for i, a in enumerate(self.members)]

    def reduce(self, parts: list[Part], gid: np.ndarray, n_groups: int) -> list[Part]:
        return [a.reduce(p, gid, n_groups) for a, p in zip(self.members, parts)]

    def grow(self, n: int) -> None:
        for a in self.members:
            a.grow(n)
        self.n = max(self.n, n)

    def compact(self, keep: np.ndarray, remap: np.ndarray) -> None:
        for a in self.members:
            a.compact(keep, remap)
        self.n = len(keep)

    def merge(self, slots: np.ndarray, parts: list[Part]) -> None:
        for a, p in zip(self.members, parts):
            a.merge(slots, p)

    def retract(self, slots: np.ndarray, parts: list[Part]) -> str | None:
        """Take the rows of ``parts`` back out of (distinct) ``slots``; the name of the
        first aggregate that could not, else None."""
        failed = None
        for a, p in zip(self.members, parts):
            if not a.retract(slots, p) and failed is None:
                failed = a.func
        return failed

    def reset(self, slots: np.ndarray) -> None:
        for a in self.members:
            a.reset(slots)

    def rows(self, slots: np.ndarray) -> np.ndarray:
        """The row count of each slot (a retracting set only)."""
        assert self.counter is not None
        return self.counter.cols[0].values[slots]

    def gather(self, slots: np.ndarray) -> list[Part]:
        return [a.gather(slots) for a in self.members]

    def set(self, slots: np.ndarray, parts: list[Part]) -> None:
        for a, p in zip(self.members, parts):
            a.set(slots, p)

    def finals(self, slots: np.ndarray) -> list[pa.Array]:
        out = []
        for a in self.aggs:
            v = a.final(slots)
            out.append(v if v.type == a.out_type else v.cast(a.out_type))
        return out

    @staticmethod
    def changed(before: list[pa.Array], after: list[pa.Array]) -> np.ndarray:
        """Row-wise: any output differs between ``before`` and ``after``."""
        n = len(before[0]) if before else 0
        out = np.zeros(n, np.bool_)
        for b, a in zip(before, after):
            out |= _differs(b, a)
        return out

    # -- snapshot ---------------------------------------------------------------------
    def state_columns(self) -> dict[str, pa.Array]:
        return {
            f"agg{a.idx}_{j}": arr for a in self.members for j, arr in enumerate(a.state_arrays())
        }

    def extra_tables(self) -> dict[str, pa.Table]:
        out: dict[str, pa.Table] = {}
        for a in self.members:
            out.update(a.extra_tables())
        return out

    def load(self, slot_table: pa.Table, tables: dict[str, pa.Table], n_slots: int) -> None:
        for a in self.members:
            arrays = []
            j = 0
            while f"agg{a.idx}_{j}" in slot_table.column_names:
                arrays.append(_arr(slot_table.column(f"agg{a.idx}_{j}")))
                j += 1
            a.load(arrays, tables, n_slots)
        self.n = n_slots

    def extra_rows(self) -> int:
        return sum(a.extra_rows() for a in self.members)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.members)
