"""``GROUP BY GROUPING SETS / ROLLUP / CUBE`` and ``grouping()`` in streaming.

A GROUP BY with grouping sets runs as one aggregate keyed by every key of every set plus
the set's number (:data:`GID`): its input is the union of one copy of the pre-projected
rows per set, in which the keys the set leaves out are NULL and the number is a constant.
Each set's groups are so told apart from another set's (a key a set groups by may itself
be NULL), the aggregate's changelog is keyed by them, and ``grouping(a, b)`` is a constant
per set: one bit per argument, the first the most significant, set when the set leaves that
argument out. Repeated sets give repeated groups, as in the batch result.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp

#: The aggregate key numbering the grouping set of a row.
GID = "__gid"

Sets = list[frozenset[int]]


def expand(group: Sequence[exp.Expr]) -> tuple[list[exp.Expr], Sets]:
    """The distinct key expressions of a GROUP BY list and its grouping sets, each the
    positions (in those keys) of the keys it groups by: one set for a plain GROUP BY."""
    keys: list[exp.Expr] = []
    seen: dict[str, int] = {}

    def at(e: exp.Expr) -> int:
        text = e.sql()
        if text not in seen:
            seen[text] = len(keys)
            keys.append(e)
        return seen[text]

    def elements(e: exp.Expr) -> frozenset[int]:
        if isinstance(e, exp.Tuple):
            return frozenset(at(x) for x in e.expressions)
        if isinstance(e, exp.Paren):
            return elements(e.this)
        return frozenset({at(e)})

    factors: list[Sets] = []
    for item in group:
        if isinstance(item, exp.GroupingSets):
            factors.append([elements(e) for e in item.expressions])
        elif isinstance(item, exp.Rollup):
            parts = [elements(e) for e in item.expressions]
            factors.append([frozenset().union(*parts[:n]) for n in range(len(parts), -1, -1)])
        elif isinstance(item, exp.Cube):
            parts = [elements(e) for e in item.expressions]
            factors.append(
                [
                    frozenset().union(*(p for p, on in zip(parts, mask, strict=True) if on))
                    for mask in itertools.product((True, False), repeat=len(parts))
                ]
            )
        else:
            factors.append([elements(item)])
    sets = [frozenset().union(*combo) for combo in itertools.product(*factors)]
    return keys, sets


def branches(
    pre: lp.PlanNode,
    key_names: list[str],
    sets: list[frozenset[str]],
    project: Callable[[lp.PlanNode, exp.Select], lp.PlanNode],
) -> lp.PlanNode:
    """The union of one copy of ``pre``'s rows per set: the keys it leaves out NULL (of
    their type), and :data:`GID` its number."""
    if pre.updating:
        raise PlanError(
            "GROUP BY GROUPING SETS / ROLLUP / CUBE over a changelog (the result of an "
            "unbounded GROUP BY or top-N) is not supported in streaming; group the source rows"
        )
    copies = []
    for number, keep in enumerate(sets):
        select = exp.select()
        for name in pre.schema.names:
            col = exp.column(name, "__pre", quoted=True)
            if name in key_names and name not in keep:
                # NULL of the key's type: a CASE with no true branch is typed by its THEN.
                select.select(
                    exp.alias_(
                        exp.Case(ifs=[exp.If(this=exp.false(), true=col)]), name, quoted=True
                    ),
                    copy=False,
                )
            else:
                select.select(col, copy=False)
        select.select(exp.alias_(_int(number), GID, quoted=True), copy=False)
        copies.append(project(pre, select))
    fields = [
        f.with_nullable(any(c.schema.field(i).nullable for c in copies))
        for i, f in enumerate(copies[0].schema)
    ]
    return lp.Union(tuple(copies), pa.schema(fields))


def replace_grouping(
    node: exp.Expr, keys: list[exp.Expr], sets: Sets, gid: exp.Expr | None
) -> exp.Expr:
    """``node`` with every ``grouping(...)`` the constant of each set (chosen by ``gid``,
    the set number's column, when there are several sets)."""
    position = {k.sql(): i for i, k in enumerate(keys)}

    def swap(n: exp.Expr) -> exp.Expr:
        if not isinstance(n, exp.Grouping):
            return n
        args = n.expressions
        missing = [a.sql() for a in args if a.sql() not in position]
        if missing:
            raise PlanError(
                f"grouping() arguments must be GROUP BY keys: {', '.join(missing)} is not one"
            )
        values = [
            sum((position[a.sql()] not in s) << (len(args) - 1 - j) for j, a in enumerate(args))
            for s in sets
        ]
        if gid is None or len(set(values)) == 1:
            return _int(values[0])
        return exp.Case(
            ifs=[
                exp.If(this=exp.EQ(this=gid.copy(), expression=_int(i)), true=_int(v))
                for i, v in enumerate(values)
            ]
        )

    return node.transform(swap)


def _int(value: int) -> exp.Expr:
    return exp.cast(exp.Literal.number(value), exp.DataType.build("INT"))


__all__ = ["GID", "branches", "expand", "replace_grouping"]
