"""Comma joins: ``FROM a, b [, c] WHERE ...`` as inner joins with ``ON``.

Each table after a comma is an inner join whose ``ON`` takes the ``WHERE`` conjuncts that
reference it and tables before it (and nothing after it): equality keys, time bounds and
other comparisons. Conjuncts on one table, and conditions of other shapes (``OR``, ``LIKE``,
function calls), stay in ``WHERE``, a filter after the join: for an inner join both mean
the same. The join is marked (``meta[COMMA]``): with a bounded table whose comparisons are
no time condition, it runs as a lookup join filtered by them after (:mod:`.joins`). A
comma join without an equality key between its two sides is a cross join of streams,
refused.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.sql import statements as st

#: ``Join.meta`` key marking a join written with a comma.
COMMA = "comma_join"
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


def is_comma(join: exp.Join) -> bool:
    """A join written with a comma: no kind, side, method, ON or USING."""
    return not any(join.args.get(a) for a in ("on", "using", "kind", "side", "method"))


def with_on(select: exp.Select) -> exp.Select:
    """``select`` (a copy when it has comma joins) with every comma join given its ``ON``."""
    joins = select.args.get("joins") or []
    if not any(is_comma(j) for j in joins):
        return select
    select = select.copy()
    joins = select.args["joins"]
    items = [select.args["from_"].this] + [j.this for j in joins]
    rels: list[st.Relation] = [n.meta["relation"] for n in items]
    order = [r.alias for r in rels]
    where = select.args.get("where")
    kept: list[exp.Expr] = []
    ons: dict[int, list[exp.Expr]] = {}
    for cond in _conjuncts(where.this) if where is not None else []:
        tables = {c.table for c in cond.find_all(exp.Column)}
        last = max((order.index(t) for t in tables if t in order), default=0)
        join = joins[last - 1] if last else None
        if len(tables) < 2 or not tables <= set(order) or join is None or not is_comma(join):
            kept.append(cond)
        elif _is_key(cond, order[last]) or isinstance(cond, _COMPARISONS):
            ons.setdefault(last - 1, []).append(cond)
        else:
            kept.append(cond)
    for i, join in enumerate(joins):
        if not is_comma(join):
            continue
        conds = ons.get(i, [])
        if not any(_is_key(c, order[i + 1]) for c in conds):
            raise PlanError(_cross_join(rels[: i + 1], rels[i + 1]))
        join.set("on", exp.and_(*[c.copy() for c in conds]))
        join.meta[COMMA] = True
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


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return _conjuncts(node.this)
    return [node]
