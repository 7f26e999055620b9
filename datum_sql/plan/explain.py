"""EXPLAIN text: the logical plan as an indented tree, then the job graph.

The planner names the columns it makes up (``__ts`` for a window's time column, ``__k0``
for a grouping key, ``__a0`` for an aggregate's argument, ``__agg0`` for its result); the
text shows what the user wrote in their place: the column or expression, or the name the
SELECT gives an aggregate. Settings and node options are written as ``key=value``, not
as Python dicts.

The user's string literals are never rewritten: a SQL statement (a Calc's SELECT) is renamed
on its sqlglot tree and rendered again; any other text (node labels, options) only outside
the string literals sqlglot's tokenizer finds in it. The query text the user wrote, a join
filter compiled to a pyarrow expression (whose text quotes literals as SQL quotes names)
and a compiled program's literals (Python reprs) are shown as they are.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from datum_sql.engine import expressions as ex
from datum_sql.engine.jobgraph import JobGraph
from datum_sql.plan import logical as lp
from datum_sql.plan.build import DISTINCT_AGGREGATES
from datum_sql.plan.engines import DataFusion

#: A made-up column, quoted or not, and a qualifier naming a made-up input (``"__agg".``).
_INTERNAL = re.compile(r'(?<![\w"])"?(__[A-Za-z]+\d*)"?(?![\w"])')
_INTERNAL_QUALIFIER = re.compile(r'"?__[A-Za-z]+\d*"?\.')
_AGG_FUNCS = {"count_star": "count(*)"} | {
    func: f"{func.removesuffix('_distinct')}(DISTINCT {{}})"
    for func in DISTINCT_AGGREGATES.values()
    if func.endswith("_distinct")
}
#: An operator function of DISTINCT values, called: ``sum_distinct(x)``.
_DISTINCT_CALL = re.compile(
    rf"\b({'|'.join(f for f in DISTINCT_AGGREGATES.values() if f.endswith('_distinct'))})"
    r"\(([^()]*)\)"
)
#: A name that needs no quotes.
_PLAIN = re.compile(r"[a-z_][a-z0-9_]*")


def _is_internal(name: str) -> bool:
    return name.startswith("__")


def explain_logical(plan: lp.LogicalPlan, names: dict[str, str] | None = None) -> str:
    """The plan as an indented tree; with ``names`` (see :func:`user_names`), in the user's
    words."""
    lines: list[str] = []

    def visit(node: lp.PlanNode, depth: int) -> None:
        cols = ", ".join(f"{f.name}: {f.type}" for f in node.schema)
        mark = " [changelog]" if node.updating else ""
        label = node.label()
        if names is not None:
            label = (
                f"Calc({_readable_sql(node.sql, names)})"
                if isinstance(node, lp.Calc)
                else _readable_text(label, names, keep=_kept(vars(node)))
            )
            cols = _readable_text(cols, names)
        lines.append(f"{'  ' * depth}{label}{mark}  -> ({cols})")
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
                if call.input2 is not None:
                    arg += f", {call.input2}"
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
        names = {k: _readable_text(v, names) for k, v in names.items()}
    return names


def _projections(sql: str) -> list[tuple[str, str]]:
    """(alias, expression text, table qualifiers dropped) of each aliased projection of a
    Calc's SELECT."""
    try:
        tree = sqlglot.parse_one(sql, read=DataFusion)
    except sqlglot.errors.ParseError:
        return []
    out = []
    for projection in getattr(tree, "expressions", []):
        if isinstance(projection, exp.Alias):
            inner = projection.this.copy()
            for column in inner.find_all(exp.Column):
                column.set("table", None)
            out.append((projection.alias, inner.sql(dialect=DataFusion)))
    return out


def _readable_sql(sql: str, names: dict[str, str]) -> str:
    """A Calc's SELECT in the user's words, renamed on its tree: made-up columns replaced
    by what they stand for, made-up qualifiers and ``input`` aliases dropped, ``a AS a``
    shown as ``a``, plain names unquoted. Literals are nodes of their own, never touched."""
    try:
        tree = sqlglot.parse_one(sql, read=DataFusion)
    except sqlglot.errors.ParseError:  # not sqlglot's SQL: renamed outside its literals
        return _readable_text(sql, names)
    for table in tree.find_all(exp.Table):
        if table.name == "input" and _is_internal(table.alias):
            table.set("alias", None)
    for column in list(tree.find_all(exp.Column)):
        if _is_internal(column.table):
            column.set("table", None)
        if not column.table and column.name in names:
            column.replace(exp.Var(this=names[column.name]))
    for alias in list(tree.find_all(exp.Alias)):
        if alias.alias in names:
            alias.set("alias", exp.Identifier(this=names[alias.alias], quoted=False))
        inner = alias.this
        plain = isinstance(inner, exp.Column | exp.Var) and not inner.args.get("table")
        if plain and inner.name == alias.alias:
            alias.replace(inner)
    for ident in tree.find_all(exp.Identifier):
        if ident.quoted and _PLAIN.fullmatch(ident.name):
            ident.set("quoted", False)
    return tree.sql(dialect=DataFusion)


def _kept(value: Any) -> list[str]:
    """Texts in ``value`` (an option, a node's fields) shown as they are: pyarrow compute
    expressions, and a program's string literals and kernel options (Python reprs)."""
    if isinstance(value, pc.Expression):
        return [str(value)]
    if isinstance(value, ex.Program):
        value = (value.where, *value.columns)
    if isinstance(value, ex.Literal):
        return [str(value)] if isinstance(value.value, str) else []
    if isinstance(value, ex.Call):
        return ([] if value.option is None else [repr(value.option)]) + _kept(value.args)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [text for v in value for text in _kept(v)]
    return []


def _readable_text(text: str, names: dict[str, str], keep: list[str] | None = None) -> str:
    """Text that is not one SQL statement (a node label, an option) in the user's words:
    the rewrites below apply only between the string literals of ``text``, and never to
    the pieces ``keep`` lists."""
    if keep:
        longest_first = sorted(set(keep), key=len, reverse=True)
        alternatives = "|".join(map(re.escape, longest_first))
        pieces = re.split(rf"(?<!\w)({alternatives})(?!\w)", text)
        return "".join(p if i % 2 else _readable_text(p, names) for i, p in enumerate(pieces))
    try:
        tokens = sqlglot.tokenize(text, read=DataFusion)
    except sqlglot.errors.TokenError:  # literals not found: shown as it is, never mangled
        return text
    pieces, pos = [], 0
    for token in tokens:
        if token.token_type in (TokenType.STRING, TokenType.NATIONAL_STRING):
            pieces += [_rewrite(text[pos : token.start], names), text[token.start : token.end + 1]]
            pos = token.end + 1
    return "".join(pieces) + _rewrite(text[pos:], names)


def _rewrite(text: str, names: dict[str, str]) -> str:
    """The renaming of :func:`_readable_text`, over text holding no string literal."""
    text = _INTERNAL_QUALIFIER.sub("", text)
    text = _INTERNAL.sub(lambda m: names.get(m.group(1), m.group(0)), text)
    text = text.replace("count_star(*)", "count(*)")
    text = _DISTINCT_CALL.sub(lambda m: _AGG_FUNCS[m.group(1)].format(m.group(2)), text)
    text = re.sub(rf'"({_PLAIN.pattern})"', r"\1", text)  # plain names need no quotes
    text = re.sub(r"(?<![\w.$])(\w+) AS \1\b", r"\1", text)  # "a AS a" reads "a"
    # an aggregate shown by its call: "count(*)=count(*)" reads "count(*)"
    return re.sub(r"(?<![\w(])([\w.]+\([^()]*\))=\1(?![\w(])", r"\1", text)


def _value(value: Any) -> str:
    """A job graph option's value without Python reprs."""
    if isinstance(value, dict):
        if {"func", "output"} <= set(value):
            func = _AGG_FUNCS.get(value["func"], f"{value['func']}({{}})")
            args = ", ".join(value[k] for k in ("input", "input2") if value.get(k)) or "*"
            return f"{value['output']}={func.format(args)}"
        return "(" + ", ".join(f"{k}={_value(v)}" for k, v in value.items() if v is not None) + ")"
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, list | tuple) and len(v) == 2 for v in value):
            return "[" + ", ".join(f"{_value(a)} AS {_value(b)}" for a, b in value) + "]"
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return str(value)


def _option(key: str, value: Any, names: dict[str, str]) -> str:
    """A job graph option in the user's words: a Calc's SQL renamed on its tree, the
    user's query as written, anything else renamed outside its literals (see :func:`_kept`)."""
    if key == "sql" and isinstance(value, str):
        return _readable_sql(value, names)
    if key == "query":
        return _value(value)
    return _readable_text(_value(value), names, keep=_kept(value))


def _graph_text(graph: JobGraph, names: dict[str, str]) -> str:
    lines = []
    for n in graph.nodes:
        ins = f" <- {', '.join(n.inputs)}" if n.inputs else ""
        cfg = ", ".join(f"{k}={_option(k, v, names)}" for k, v in n.config.items() if k != "schema")
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
    return (
        f"{head}== logical plan ==\n{explain_logical(plan, names)}\n\n"
        f"== job graph ==\n{_graph_text(graph, names)}"
    )
