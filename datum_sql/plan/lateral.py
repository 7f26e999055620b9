"""Python table functions in FROM → :class:`Lateral` steps.

``FROM t, LATERAL f(t.x) AS f`` (also ``CROSS JOIN LATERAL``, ``t, f(t.x)``, and ``LEFT
JOIN LATERAL f(t.x) AS f ON TRUE``, which keeps the rows of ``t`` for which ``f`` yields
nothing) plans as: the rows so far (one table, or the joins before the call), a Calc
adding the call's arguments as columns, and a Lateral step calling ``f`` once per batch
and repeating each input row for every output row ``f`` says came from it. The step is
stateless and append-only: it passes the input's time columns through with their lags, so
windows, aggregates, joins and sinks after it read it as they read its input.

``FROM f(1, 'a')`` (literal arguments only) is the same step over a single input row
(:class:`Values`): a bounded table, in streaming and in batch.

Batch queries (``ctx.sql``) that call a table function run on the streaming engine over
bounded copies of their tables, so that one code path computes every call; for the type
check of a query's batch form, :func:`stand_ins` replaces each call by an empty table of
its output columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan.engines import DataFusion
from datum_sql.plan.joins import JOINED, Side, qualified
from datum_sql.plan.typecheck import user_text
from datum_sql.sql import statements as st
from datum_sql.sql import table_signatures
from datum_sql.sql.types import sql_type

TABLE_FUNCTION = "table function"
#: The job-graph source kind of :class:`Values` (no catalog table: the context makes it).
VALUES_SOURCE = "__values"
#: The single column of the one input row of a call with literal arguments.
VALUES_COLUMN = "__values_row"
_ARG = "__arg{}"

#: Plans a SELECT over a node's rows as a Calc (``build.calc`` with the query's text).
CalcStep = Callable[[lp.PlanNode, exp.Select, st.Relation], lp.PlanNode]


@dataclass(frozen=True)
class Values(lp.PlanNode):
    """One row, then the end of the input: what a table function called with literal
    arguments expands."""

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(VALUES_COLUMN, pa.int8())])

    def label(self) -> str:
        return "Values(1 row)"


@dataclass(frozen=True)
class Lateral(lp.PlanNode):
    """``function(arguments)`` called on every batch of ``input``: each input row repeated
    for each output row it yields (``passed`` input columns, then its ``outputs``), and with
    ``outer`` once with NULLs when it yields none."""

    input: lp.PlanNode
    function: str
    arguments: tuple[str, ...]
    #: (input column, output column) pairs of the input row passed on.
    passed: tuple[tuple[str, str], ...]
    #: (function column, output column) pairs.
    outputs: tuple[tuple[str, str], ...]
    out_schema: pa.Schema
    outer: bool = False

    def __post_init__(self) -> None:
        if self.input.updating:
            raise PlanError(
                f"{self.function}(): a table function reads append-only rows, and its input is "
                "a changelog (the result of an unbounded GROUP BY or top-N); call it on the rows "
                "before they are aggregated"
            )

    @property
    def children(self) -> tuple[lp.PlanNode, ...]:
        return (self.input,)

    @property
    def schema(self) -> pa.Schema:
        return self.out_schema

    @property
    def time_lags(self) -> dict[str, int]:
        lags = self.input.time_lags
        return {out: lags[src] for src, out in self.passed if src in lags}

    def label(self) -> str:
        join = "LEFT JOIN LATERAL " if self.outer else "LATERAL "
        return f"{join}{self.function}({', '.join(self.arguments)})"


def plan_call(node: exp.Expr, rel: st.Relation, calc: CalcStep) -> lp.PlanNode:
    """``FROM f(literals)``: the call over one row; its columns under their bare names."""
    values = Values()
    own = st.Relation(alias=rel.alias, kind="subquery", columns=[VALUES_COLUMN])
    step = _lateral(node.this, rel, Side(values, {rel.alias: own}), calc, outer=False, bare=True)
    return step.plan


def plan_joins(
    select: exp.Select,
    left: Side,
    rights: list[tuple[exp.Join, Any]],
    plan_joins: Callable[[exp.Select, Side, list[tuple[exp.Join, Side]]], Side],
    calc: CalcStep,
) -> Side:
    """The FROM items after the first, in order: runs of joins by ``plan_joins``, each
    table function call (a FROM node in ``rights`` where the others are Sides) by a
    Lateral step over the rows joined so far."""
    current, run = left, []
    for join, right in rights:
        if isinstance(right, Side):
            run.append((join, right))
            continue
        if run:
            current, run = plan_joins(select, current, run), []
        current = _lateral_join(join, right, current, calc)
    return plan_joins(select, current, run) if run else current


def _lateral_join(join: exp.Join, node: exp.Expr, left: Side, calc: CalcStep) -> Side:
    rel: st.Relation = node.meta["relation"]
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    on = join.args.get("on")
    call = f"{node.this.name.lower()}()"
    if side not in ("", "LEFT") or kind not in ("", "INNER", "CROSS", "OUTER"):
        raise PlanError(
            f"{side or kind} JOIN LATERAL {call} is not supported; use [CROSS] JOIN LATERAL, a "
            "comma, or LEFT JOIN LATERAL ... ON TRUE"
        )
    outer = side == "LEFT"
    if outer and not (on is None or on == exp.true()):
        raise PlanError(
            f"LEFT JOIN LATERAL {call} takes ON TRUE: filter the function's rows in WHERE or "
            "in a derived table"
        )
    step = _lateral(node.this, rel, left, calc, outer=outer, bare=False)
    if on is not None and on != exp.true():
        step.after.append(on)
    return step


def _lateral(
    call: exp.Anonymous, rel: st.Relation, left: Side, calc: CalcStep, *, outer: bool, bare: bool
) -> Side:
    """The Calc adding the call's arguments to ``left``'s rows, and the Lateral step."""
    sig = table_signatures.lookup(call.name)
    if sig is None:
        raise PlanError(f"table function {call.name.lower()}() is not registered")
    args = list(call.expressions)
    if len(args) != len(sig.input_types):
        raise PlanError(
            f"{sig.name}() takes {len(sig.input_types)} argument(s) "
            f"({', '.join(sql_type(t) for t in sig.input_types)}), got {len(args)}"
        )
    joined = len(left.relations) > 1
    alias = JOINED if joined else next(iter(left.relations))
    reader = st.Relation(alias=alias, kind="subquery", columns=list(left.plan.schema.names))

    def read(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and joined and n.table in left.relations:
            return exp.column(qualified(n.table, n.name), JOINED, quoted=True)
        return n

    inputs = [n for n in left.plan.schema.names if n != lp.OP_COLUMN and n != VALUES_COLUMN]
    passed = [(n if joined or bare else qualified(alias, n)) for n in inputs]
    items = [
        exp.alias_(exp.column(n, alias, quoted=True), out, quoted=True)
        for n, out in zip(inputs, passed, strict=True)
    ]
    values = [a.copy().transform(read) for a in args]
    select = exp.select(
        *items, *(exp.alias_(v, _ARG.format(i), quoted=True) for i, v in enumerate(values))
    )
    plan = calc(left.plan, select, reader)
    got = [plan.schema.field(_ARG.format(i)).type for i in range(len(args))]
    for i, (g, want) in enumerate(zip(got, sig.input_types, strict=True)):
        if not _coercible(g, want):
            raise PlanError(
                f"{sig.name}() argument {i + 1} ({user_text(args[i])}) is {sql_type(g)}, expected "
                f"{sql_type(want)}"
            )
    outputs = [
        (f, (c if bare else qualified(rel.alias, c)))
        for f, c in zip(sig.output_schema.names, rel.columns, strict=True)
    ]
    schema = pa.schema(
        [plan.schema.field(n) for n in passed]
        + [pa.field(out, sig.output_schema.field(f).type, nullable=True) for f, out in outputs]
    )
    node = Lateral(
        plan, sig.name, tuple(_ARG.format(i) for i in range(len(args))),
        tuple((n, n) for n in passed), tuple(outputs), schema, outer,
    )  # fmt: skip
    relations = dict(left.relations) if not bare else {}
    return Side(node, {**relations, rel.alias: rel}, list(left.after))


def _coercible(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether an argument of type ``got`` may be passed as ``want`` (cast on every batch,
    failing loudly on a value that does not fit)."""
    if got == want or pa.types.is_null(got):
        return True
    families = (
        (pa.types.is_integer, (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)),
        (pa.types.is_floating, (pa.types.is_floating,)),
        (pa.types.is_decimal, (pa.types.is_decimal, pa.types.is_floating)),
        (_is_text, (_is_text,)),
        (pa.types.is_timestamp, (pa.types.is_timestamp,)),
        (pa.types.is_date, (pa.types.is_date,)),
    )
    return any(a(got) and any(b(want) for b in bs) for a, bs in families)


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def stand_ins(ast: exp.Expr, tables: dict[str, pa.Schema]) -> None:
    """Replace every table function call in ``ast`` by an empty table of its output columns
    (added to ``tables``), for type-checking the batch form; changes ``ast`` in place."""
    for i, node in enumerate(list(ast.find_all(exp.Lateral))):
        rel = node.meta.get("relation")
        if rel is None or rel.kind != TABLE_FUNCTION:
            continue
        name = f"__table_function_{i}"
        tables[name] = pa.schema([(c, rel.types[c]) for c in rel.columns])
        node.replace(
            exp.Table(
                this=exp.to_identifier(name, quoted=True),
                alias=exp.TableAlias(this=exp.to_identifier(rel.alias, quoted=True)),
            )
        )


def calls_table_function(ast: exp.Expr) -> bool:
    """Whether a bound query calls a Python table function anywhere."""
    return any(
        getattr(n.meta.get("relation"), "kind", None) == TABLE_FUNCTION
        for n in ast.find_all(exp.Lateral)
    )


def result_order(node: exp.Query) -> tuple[exp.Query, str | None]:
    """``node`` without its top-level ORDER BY / LIMIT / OFFSET, and the SQL applying them
    to its result (a table named ``result``, by its output columns), or None."""
    clauses = {k: node.args.get(k) for k in ("order", "limit", "offset")}
    if not any(clauses.values()):
        return node, None
    body = node.copy()
    for k in clauses:
        body.set(k, None)
    outer = exp.select("*").from_("result")
    for k, v in clauses.items():
        if v is not None:
            v = v.copy()
            for col in v.find_all(exp.Column):
                col.set("table", None)
            outer.set(k, v)
    return body, outer.sql(dialect=DataFusion)
