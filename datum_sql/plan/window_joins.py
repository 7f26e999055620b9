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
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp


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


def _carries_time(col: exp.Column, side: Any) -> bool:
    """Whether a join side's column carries event time that a watermark follows."""
    return side.name_of(col) in side.plan.time_lags
