"""A WHERE or ON condition as the list of its AND-ed parts, which the planner moves, splits
and plans one by one (join keys, time bounds, pushed-down filters, subquery joins)."""

from __future__ import annotations

from sqlglot import exp


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """``a AND (b AND c)`` as ``[a, b, c]``; parentheses around a part are dropped."""
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    return [node]
