"""Set operations in streaming: ``UNION ALL`` of queries with the same column types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp


def plan_union(
    node: exp.Union, clauses: Any, plan_query: Callable[..., lp.PlanNode]
) -> lp.PlanNode:
    """Every branch of a (left-deep) ``UNION ALL`` chain, planned into one Union."""
    if node.args.get("distinct"):
        raise PlanError(
            "UNION (distinct) is not supported in streaming; write UNION ALL, or SELECT DISTINCT "
            "over a UNION ALL in a subquery"
        )
    branches: list[lp.PlanNode] = []
    for side in (node.left, node.right):
        plan = plan_query(side, clauses)
        branches.extend(plan.inputs if isinstance(plan, lp.Union) and _is_all(side) else [plan])
    if any(b.updating for b in branches):
        raise PlanError(lp.UNION_OF_CHANGELOG)
    first = branches[0].schema
    fields = []
    for i, f in enumerate(first):
        types = [b.schema.field(i).type for b in branches]
        if any(t != f.type for t in types):
            shown = ", ".join(str(t) for t in types)
            raise PlanError(
                f"UNION ALL: column {i + 1} ({f.name!r}) has different types in its branches "
                f"({shown}); CAST them to one type"
            )
        nullable = any(b.schema.field(i).nullable for b in branches)
        fields.append(f.with_nullable(nullable))
    return lp.Union(tuple(branches), pa.schema(fields))


def _is_all(node: exp.Expr) -> bool:
    return isinstance(node, exp.Union) and not node.args.get("distinct")
