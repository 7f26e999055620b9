"""EXPLAIN text: the logical plan as an indented tree, then the job graph.

The planner names the columns it makes up (``__ts`` for a window's time column, ``__k0``
for a grouping key, ``__a0`` for an aggregate's argument, ``__agg0`` for its result); the
text shows what the user wrote in their place: the column or expression, or the name the
SELECT gives an aggregate. Settings and node options are written as ``key=value``, not
as Python dicts.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from sqlglot import exp

from datum_sql.engine.jobgraph import JobGraph
from datum_sql.plan import logical as lp

#: A made-up column, quoted or not, and a qualifier naming a made-up input (``"__agg".``).
_INTERNAL = re.compile(r'(?<![\w"])"?(__[A-Za-z]+\d*)"?(?![\w"])')
_INTERNAL_QUALIFIER = re.compile(r'"?__[A-Za-z]+\d*"?\.')
_AGG_FUNCS = {"count_star": "count(*)", "count_distinct": "count(DISTINCT {})"}


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


def _nodes(node: lp.PlanNode) -> list[lp.PlanNode]:
    out = [node]
    for child in node.children:
        out += _nodes(child)
    return out


def user_names(plan: lp.LogicalPlan) -> dict[str, str]:
    """Made-up column -> what the user wrote: the projected column or expression (table
    qualifiers dropped), an aggregate's call, or the alias the SELECT gives it. A name the
    planner reuses for different things in different parts of the plan (``__agg0`` in two
    subqueries) keeps its made-up name: the text is never wrong, only less friendly."""
    exprs: dict[str, set[str]] = {}
    aliases: dict[str, set[str]] = {}
    for node in _nodes(plan.root):
        sql = getattr(node, "sql", None) if isinstance(node, lp.Calc) else None
        if sql:
            for alias, expr in _projections(sql):
                if alias.startswith("__") and expr.replace('"', "") != alias:
                    exprs.setdefault(alias, set()).add(expr)
                bare = expr.replace('"', "")
                if bare.startswith("__agg") and not alias.startswith("__"):
                    aliases.setdefault(bare, set()).add(alias)
        for call in getattr(node, "calls", ()) or ():
            if isinstance(call, lp.AggregateCall) and call.output.startswith("__"):
                arg = call.input or "*"
                if call.func == "python":
                    func = f"{dict(call.params).get('function')}({arg})"
                else:
                    func = _AGG_FUNCS.get(call.func, call.func + "({})").format(arg)
                exprs.setdefault(call.output, set()).add(func)
    names: dict[str, str] = {}
    for name in exprs.keys() | aliases.keys():
        got_expr, got_alias = exprs.get(name, set()), aliases.get(name, set())
        if len(got_alias) == 1 and len(got_expr) <= 1:
            names[name] = next(iter(got_alias))
        elif len(got_expr) == 1 and not got_alias:
            names[name] = next(iter(got_expr))
    for _ in range(3):  # an expression of made-up names (max(__a0)) reads through them
        names = {k: _rename(v, names) for k, v in names.items()}
    return names


def _rename(text: str, names: dict[str, str]) -> str:
    return _INTERNAL.sub(lambda m: names.get(m.group(1), m.group(0)), text)


def _projections(sql: str, *, bare: bool = False) -> list[tuple[str, str]]:
    """(alias, expression text) of each aliased projection of a Calc's SELECT; ``bare``
    keeps the expression's internal names (for finding which alias an aggregate gets)."""
    try:
        tree = sqlglot.parse_one(sql, read="risingwave")
    except sqlglot.errors.ParseError:
        return []
    out = []
    for projection in getattr(tree, "expressions", []):
        if isinstance(projection, exp.Alias):
            inner = projection.this.copy()
            for column in inner.find_all(exp.Column):
                column.set("table", None)
            text = inner.sql(dialect="risingwave")
            out.append((projection.alias, text.replace('"', "") if bare else text))
    return out


def _readable(text: str, names: dict[str, str]) -> str:
    text = re.sub(r'FROM input AS "?__\w+"?', "FROM input", text)
    text = _INTERNAL_QUALIFIER.sub("", text)
    text = _rename(text, names)
    text = text.replace("count_star(*)", "count(*)")
    text = re.sub(r"count_distinct\(([^()]*)\)", r"count(DISTINCT \1)", text)
    text = re.sub(r'"([a-z_][a-z0-9_]*)"', r"\1", text)  # plain names need no quotes
    text = re.sub(r"(?<![\w.$])(\w+) AS \1\b", r"\1", text)  # "a AS a" reads "a"
    # an aggregate shown by its call: "count(*)=count(*)" reads "count(*)"
    return re.sub(r"(?<![\w(])([\w.]+\([^()]*\))=\1(?![\w(])", r"\1", text)


def _value(value: Any) -> str:
    """A job graph option's value without Python reprs."""
    if isinstance(value, dict):
        if {"func", "output"} <= set(value):
            func = _AGG_FUNCS.get(value["func"], f"{value['func']}({{}})")
            return f"{value['output']}={func.format(value.get('input') or '*')}"
        return "(" + ", ".join(f"{k}={_value(v)}" for k, v in value.items() if v is not None) + ")"
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, list | tuple) and len(v) == 2 for v in value):
            return "[" + ", ".join(f"{_value(a)} AS {_value(b)}" for a, b in value) + "]"
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def _graph_text(graph: JobGraph) -> str:
    lines = []
    for n in graph.nodes:
        ins = f" <- {', '.join(n.inputs)}" if n.inputs else ""
        cfg = ", ".join(f"{k}={_value(v)}" for k, v in n.config.items() if k != "schema")
        lines.append(f"{n.id} [{n.role}] {n.kind}({cfg}){ins}")
    return "\n".join(lines)


def explain(plan: lp.LogicalPlan, graph: JobGraph) -> str:
    names = user_names(plan)
    settings = ", ".join(
        f"{k} = {str(v).lower() if isinstance(v, bool) else v}"
        for k, v in plan.settings.items()
        if v
    )
    head = f"settings: {settings}\n" if settings else ""
    body = f"== logical plan ==\n{explain_logical(plan)}\n\n== job graph ==\n{_graph_text(graph)}"
    return head + _readable(body, names)
