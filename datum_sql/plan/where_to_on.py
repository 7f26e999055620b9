"""``WHERE`` conditions that join two tables, moved into the ``ON`` of the inner join that
brings in the later one: a comma join's keys and bounds, an inner join's time bounds.

- ``FROM a, b [, c] WHERE ...``: each table after a comma is an inner join whose ``ON``
  takes the conjuncts that compare it with the tables before it (and none after it):
  equality keys, time bounds, other comparisons. A comma join without an equality key
  between its two sides is a cross join of streams, refused naming the tables.
- ``a JOIN b ON a.k = b.k WHERE b.ts BETWEEN a.ts AND a.expires``: an inner join's
  comparisons between its two sides (BETWEEN, <, <=, >, >=) join its ``ON``, so they can
  bound it in time (Nexmark q7 joins a window back to its rows this way).

Conjuncts on one table, of other shapes (``OR``, functions) or under a ``LEFT``/``ASOF``
join stay in ``WHERE``. Every moved condition is marked (``meta[MOVED]``): for an inner
join ``ON`` and ``WHERE`` mean the same, so the join planner (:mod:`.joins`) may filter
the joined rows by a moved condition after the join instead of in it (one it cannot
compile, or all of them when the join is a lookup of a bounded table).
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan.conditions import conjuncts
from datum_sql.sql import statements as st
from datum_sql.sql.analyze import is_comma_join

#: Condition ``meta`` key: moved from ``WHERE`` (it may filter after the join instead).
MOVED = "moved_from_where"
_RANGES = (exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)
_COMPARISONS = (exp.EQ, exp.NEQ, *_RANGES)


def _inner_on(join: exp.Join) -> bool:
    kind = (join.args.get("kind") or "").upper()
    plain = not join.args.get("side") and not join.args.get("method")
    return plain and kind in ("", "INNER") and join.args.get("on") is not None


def join_conditions(select: exp.Select) -> exp.Select:
    """``select`` (a copy when anything moves) with its ``WHERE`` comparisons between two
    tables in the ``ON`` of their inner join, every comma join given its ``ON``."""
    joins = select.args.get("joins") or []
    where = select.args.get("where")
    if not joins or (where is None and not any(is_comma_join(j) for j in joins)):
        return select
    select = select.copy()
    joins = select.args["joins"]
    commas = [is_comma_join(j) for j in joins]
    items = [select.args["from_"].this] + [j.this for j in joins]
    rels: list[st.Relation] = [n.meta["relation"] for n in items]
    order = [r.alias for r in rels]
    kept: list[exp.Expr] = []
    ons: dict[int, list[exp.Expr]] = {}
    for cond in conjuncts(where.this) if where is not None else []:
        tables = {c.table for c in cond.find_all(exp.Column)}
        last = max((order.index(t) for t in tables if t in order), default=0)
        movable = len(tables) >= 2 and tables <= set(order) and last > 0
        shapes = (
            (_COMPARISONS if commas[last - 1] else _RANGES if _inner_on(joins[last - 1]) else ())
            if movable
            else ()
        )
        if isinstance(cond, shapes):
            ons.setdefault(last - 1, []).append(cond)
        else:
            kept.append(cond)
    for i, join in enumerate(joins):
        moved = [c.copy() for c in ons.get(i, [])]
        for c in moved:
            c.meta[MOVED] = True
        if commas[i]:
            if not any(_is_key(c, order[i + 1]) for c in moved):
                raise PlanError(_cross_join(rels[: i + 1], rels[i + 1]))
            join.set("on", exp.and_(*moved))
        elif moved:
            join.set("on", exp.and_(join.args["on"], *moved))
    select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return select


def _is_key(cond: exp.Expr, new: str) -> bool:
    """``x.col = y.col`` between the table a join brings in (``new``) and an earlier one."""
    if not isinstance(cond, exp.EQ):
        return False
    a, b = cond.this, cond.expression
    if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)):
        return False
    return (a.table == new) != (b.table == new)


def _name(rel: st.Relation) -> str:
    name = getattr(rel.entry, "name", None) if rel.kind != "subquery" else None
    return rel.alias if name in (None, rel.alias) else f"{name} {rel.alias}"


def _cross_join(before: list[st.Relation], new: st.Relation) -> str:
    tables = ", ".join(_name(r) for r in [*before, new])
    earlier = before[-1].alias
    return (
        f"FROM {tables}: {new.alias} is joined by a comma without an equality between its "
        f"columns and those of {', '.join(r.alias for r in before)} in WHERE, a cross join "
        "of streams, which would keep every row forever; add the join keys (WHERE "
        f"{earlier}.k = {new.alias}.k, with a time condition for two streams), or run the "
        "cross join as a batch query with ctx.sql()"
    )
