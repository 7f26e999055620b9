"""``WHERE`` conditions on one table of a join, evaluated on that table before the join.

``FROM auction A JOIN person P ON A.seller = P.id WHERE A.category = 10`` filters the
auctions before they reach the join: the join holds, probes and emits only rows that can
survive the WHERE (a lookup join indexes only the persons that pass ``P.state = 'OR'``).

A conjunct moves when every column it reads belongs to one table and that table's rows
reach the result only through joins that keep or drop them as a whole: the first table
of the FROM (the kept side of every ``LEFT`` and ``ASOF`` join) and any table joined by
a plain inner or comma join. The table joined by ``LEFT`` or ``ASOF`` keeps its
conditions in ``WHERE``: there a row that fails them may still decide the result (a NULL
extension, the latest earlier row). Conditions with a subquery, an aggregate or a window
function stay too.
"""

from __future__ import annotations

from sqlglot import exp

from datum_sql.plan.conditions import conjuncts
from datum_sql.sql import statements as st


def pushable(select: exp.Select, rels: list[st.Relation]) -> dict[str, list[exp.Expr]]:
    """The conjuncts of ``select``'s WHERE that filter one table before the joins, by
    table alias; ``select``'s WHERE loses them (``select`` is changed in place)."""
    where = select.args.get("where")
    if where is None:
        return {}
    joins = select.args.get("joins") or []
    movable = {rels[0].alias} | {
        r.alias for j, r in zip(joins, rels[1:], strict=True) if _keeps_rows_whole(j)
    }
    moved: dict[str, list[exp.Expr]] = {}
    kept: list[exp.Expr] = []
    for cond in conjuncts(where.this):
        alias = _single_table(cond)
        if alias in movable:
            moved.setdefault(alias, []).append(cond)
        else:
            kept.append(cond)
    if moved:
        select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return moved


def _keeps_rows_whole(join: exp.Join) -> bool:
    """An inner or comma join: a row of its right table reaches the result only joined."""
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    method = (join.args.get("method") or "").upper()
    return not side and not method and kind in ("", "INNER")


def _single_table(cond: exp.Expr) -> str | None:
    """The one table ``cond`` reads, or None (several, none, or a shape that stays)."""
    if cond.find(exp.Select, exp.AggFunc, exp.Window, exp.Star) is not None:
        return None
    tables = {c.table for c in cond.find_all(exp.Column)}
    if len(tables) != 1 or "" in tables:
        return None
    return tables.pop()
