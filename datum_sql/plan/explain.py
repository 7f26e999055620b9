"""EXPLAIN text: the logical plan as an indented tree, then the job graph."""

from __future__ import annotations

from datum_sql.engine.jobgraph import JobGraph
from datum_sql.plan import logical as lp


def explain_logical(plan: lp.LogicalPlan) -> str:
    lines: list[str] = []

    def visit(node: lp.PlanNode, depth: int) -> None:
        cols = ", ".join(f"{f.name}: {f.type}" for f in node.schema)
        mark = " [changelog]" if node.updating else ""
        lines.append(f"{'  ' * depth}{node.label()}{mark}  -> ({cols})")
        for child in node.children:
            visit(child, depth + 1)

    visit(plan.root, 0)
    return "\n".join(lines)


def explain(plan: lp.LogicalPlan, graph: JobGraph) -> str:
    settings = {k: v for k, v in plan.settings.items() if v}
    head = f"settings: {settings}\n" if settings else ""
    return f"{head}== logical plan ==\n{explain_logical(plan)}\n\n== job graph ==\n{graph}"
