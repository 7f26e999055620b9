"""Joins on the event time of composed inputs.

Any input column that carries event time (``PlanNode.time_columns``: a source's event-time
column, a windowed aggregate's ``window_end``, ...) can bound a join, so two streams join
with finite state when their condition relates such columns:

- ``ON a.window_end = b.window_end [AND keys]`` (two windowed results on their window
  bounds, or two streams on equal event times) is an interval join whose bounds are both 0
  (``l >= r AND l <= r``): a pair is emitted when its second row arrives, and rows are
  purged once the other side's watermark passes them;
- ``ON b.price = w.max_price WHERE b.ts BETWEEN w.window_end - INTERVAL ... AND
  w.window_end`` (rows joined back to the aggregate of their window): an inner join's
  ``WHERE`` comparisons between the two sides' time columns are its time condition, moved
  into ``ON`` (the same rows for an inner join).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from datum_sql.plan import logical as lp

_COMPARISONS = (exp.Between, exp.GT, exp.GTE, exp.LT, exp.LTE)


def equal_times_as_range(conds: list[exp.Expr], left: Any, right: Any) -> list[exp.Expr]:
    """``conds`` (an ON clause's conjuncts, equalities only) with the first equality of two
    columns that carry event time on either side written as ``l >= r AND l <= r``: the
    bounds of an interval join."""
    if not all(isinstance(c, exp.EQ) for c in conds):
        return conds
    for i, c in enumerate(conds):
        a, b = c.this, c.expression
        if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
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
    rel = side.relations[col.table]
    plan = side.plan
    if rel.kind == "subquery":
        return side.name_of(col) in plan.time_columns
    return isinstance(plan, lp.Scan) and plan.event_time == col.name


def move_time_conditions(select: exp.Select, is_time: dict[str, set[str]]) -> None:
    """Move, in place, each ``WHERE`` comparison between time columns of two tables into
    the ``ON`` of the inner join that brings in the later one of them.

    ``is_time`` maps each FROM alias to its columns that carry event time."""
    where = select.args.get("where")
    if where is None:
        return
    order = [select.args["from_"].this.alias_or_name] + [
        j.this.alias_or_name for j in select.args.get("joins") or []
    ]
    kept: list[exp.Expr] = []
    for cond in _conjuncts(where.this):
        target = _join_for(cond, select, order, is_time)
        if target is None:
            kept.append(cond)
        else:
            target.set("on", exp.and_(target.args["on"], cond.copy()))
    select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)


def _join_for(
    cond: exp.Expr, select: exp.Select, order: list[str], is_time: dict[str, set[str]]
) -> exp.Join | None:
    if not isinstance(cond, _COMPARISONS):
        return None
    cols = list(cond.find_all(exp.Column))
    tables = {c.table for c in cols}
    if len(tables) != 2 or any(c.name not in is_time.get(c.table, set()) for c in cols):
        return None
    last = max(order.index(t) for t in tables if t in order) if tables <= set(order) else 0
    if last == 0:
        return None
    join = select.args["joins"][last - 1]
    kind = (join.args.get("kind") or "").upper()
    inner = not join.args.get("side") and not join.args.get("method") and kind in ("", "INNER")
    return join if inner and join.args.get("on") is not None else None


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]
