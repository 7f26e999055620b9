"""Joins on the event time of composed inputs.

Any input column that carries event time (``PlanNode.time_lags``: a source's event-time
column, a windowed aggregate's ``window_end`` or ``window_start``, ...) can bound a join, so
two streams join with finite state when their condition relates such columns:

- ``ON a.window_start = b.window_start [AND keys] [AND a.n >= b.m]`` (two windowed results
  on their window bounds, or two streams on equal event times) is an interval join whose
  bounds are both 0 (``l >= r AND l <= r``), its other conditions a filter on the pairs: a
  pair is emitted when its second row arrives, and rows are purged once the other side's
  watermark, less the lag of its time column, passes them;
- ``ON b.price = w.max_price WHERE b.ts BETWEEN w.window_end - INTERVAL ... AND
  w.window_end`` (rows joined back to the aggregate of their window): an inner join's
  ``WHERE`` comparisons between its two sides are moved into ``ON`` (the same rows for an
  inner join) by :mod:`.where_to_on`, and bound it in time there.

Joined on both bounds of tumble or hop windows of one size (``a.window_start =
b.window_start AND a.window_end = b.window_end``, Nexmark q8), the end equality follows
from the start's (each end is its start plus the size): :func:`drop_implied_window_bound`
drops it, and the join keys on one column less.

A side that is a windowed aggregate without GROUP BY keys, joined on its ``window_end``
or ``window_start``, has one row per window: a row of the other side meets at most
``(upper - lower) / slide + 1`` of its rows by time alone. :func:`sparse_side` names it,
and the interval join then holds each input's rows as they arrived and finds pairs by
time, comparing keys on them, with no key index and no sorted state (EXPLAIN shows
``sparse right``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.engine.state.keys import int64_exact
from datum_sql.plan import logical as lp

#: A side is sparse when a row of the other side meets at most this many of its rows by
#: time alone.
SPARSE_ROWS = 16


def equal_times_as_range(conds: list[exp.Expr], left: Any, right: Any) -> list[exp.Expr]:
    """``conds`` (an ON clause's conjuncts) with the first equality of two columns that
    carry event time on either side written as ``l >= r AND l <= r``: the bounds of an
    interval join, whose other conditions (``a.num >= b.maxn``) filter the pairs."""
    for i, c in enumerate(conds):
        if not isinstance(c, exp.EQ):
            continue
        a, b = c.this, c.expression
        if not (isinstance(c, exp.EQ) and isinstance(a, exp.Column) and isinstance(b, exp.Column)):
            continue
        if b.table in left.relations and a.table in right.relations:
            a, b = b, a
        sides = a.table in left.relations and b.table in right.relations
        if sides and _carries_time(a, left) and _carries_time(b, right):
            bounds = [exp.GTE(this=a.copy(), expression=b.copy()),
                      exp.LTE(this=a.copy(), expression=b.copy())]  # fmt: skip
            return conds[:i] + bounds + conds[i + 1 :]
    return conds


def drop_implied_window_bound(conds: list[exp.Expr], left: Any, right: Any) -> list[exp.Expr]:
    """``conds`` without ``a.window_end = b.window_end`` when ``a.window_start =
    b.window_start`` of the same two windows is among them too and both are tumble or hop
    windows of one size: each side's end is its start plus that size, so the start's
    equality implies the end's, and the join keys on one column less."""
    found: dict[str, list[tuple[int, Any, Any]]] = {"window_start": [], "window_end": []}
    for i, c in enumerate(conds):
        pair = _equal_columns(c, left, right)
        if pair is None:
            continue
        lb = _window_column(left.plan, left.name_of(pair[0]))
        rb = _window_column(right.plan, right.name_of(pair[1]))
        if lb is None or rb is None or lb[1] != rb[1]:
            continue
        (lw, col), rw = lb, rb[0]
        if _size(lw) == _size(rw):
            found[col].append((i, lw, rw))
    # an end equality is implied by a start equality of the same two windows
    drop = {i for i, lw, rw in found["window_end"]
            if any(lw is ls and rw is rs for _, ls, rs in found["window_start"])}  # fmt: skip
    return [c for i, c in enumerate(conds) if i not in drop]


def _size(agg: lp.Aggregate) -> int:
    """The size of a window aggregate (found by _window_column: its window is set)."""
    assert agg.window is not None
    return int(agg.window.size_us)


def _equal_columns(c: exp.Expr, left: Any, right: Any) -> tuple[exp.Column, exp.Column] | None:
    """(left column, right column) of an equality of two columns, one of each side."""
    if not (isinstance(c, exp.EQ) and isinstance(c.this, exp.Column)):
        return None
    a, b = c.this, c.expression
    if not isinstance(b, exp.Column):
        return None
    if b.table in left.relations and a.table in right.relations:
        a, b = b, a
    if a.table in left.relations and b.table in right.relations:
        return a, b
    return None


def _window_column(plan: lp.PlanNode, column: str) -> tuple[lp.Aggregate, str] | None:
    """The tumble or hop aggregate whose ``window_start`` or ``window_end`` ``plan``'s
    column ``column`` is, read through renames and watermark lags, and its name there."""
    while True:
        if isinstance(plan, lp.WatermarkLag):
            plan = plan.input
        elif isinstance(plan, lp.Calc) and plan.projection is not None:
            back = {out: src for src, out in plan.projection}
            if column not in back:
                return None
            plan, column = plan.input, back[column]
        else:
            break
    if not isinstance(plan, lp.Aggregate) or column not in ("window_start", "window_end"):
        return None
    w = plan.window
    return (plan, column) if w is not None and w.kind in ("tumble", "hop") else None


def _carries_time(col: exp.Column, side: Any) -> bool:
    """Whether a join side's column carries event time that a watermark follows."""
    return side.name_of(col) in side.plan.time_lags


def sparse_side(config: dict, left: Any, right: Any, keys: list[tuple[str, str]]) -> str | None:
    """The side (``"left"``, ``"right"``) of an interval join with constant bounds in
    microseconds that is sparse (see the module's text), or None. Its keys must compare
    as int64 (integers, timestamps, dates: equal types, or integers both)."""
    if config.get("end_side") is not None or config.get("unit") != "us":
        return None
    lower, upper = config.get("lower_us"), config.get("upper_us")
    if lower is None or upper is None or lower > upper:
        return None
    for lk, rk in keys:
        lt, rt = left.plan.schema.field(lk).type, right.plan.schema.field(rk).type
        same = lt == rt or (pa.types.is_integer(lt) and pa.types.is_integer(rt))
        if not (same and int64_exact(lt) and int64_exact(rt)):
            return None
    for name, side in (("right", right), ("left", left)):
        slide = _one_row_per(side.plan, config[f"{name}_time"])
        if slide is not None and (upper - lower) // slide + 1 <= SPARSE_ROWS:
            return name
    return None


def _one_row_per(plan: lp.PlanNode, column: str) -> int | None:
    """The step (microseconds) of ``plan``'s column ``column`` when ``plan`` has at most
    one row per step of it: the ``window_end`` or ``window_start`` of a tumble or hop
    aggregate without keys, read through renames and watermark lags; else None."""
    found = _window_column(plan, column)
    if found is None or found[0].keys or found[0].window is None:
        return None
    w = found[0].window
    return int(w.slide_us or w.size_us) if w.kind == "hop" else int(w.size_us)
