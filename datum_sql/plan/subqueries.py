"""Subqueries in WHERE → :class:`~logical.SubqueryJoin` steps against bounded tables.

- ``x [NOT] IN (SELECT v FROM t ...)``: a semi-join (anti-join) on ``x = v`` with SQL's
  NULL rules: a NULL ``v`` makes ``NOT IN`` match nothing, a NULL ``x`` matches nothing.
- ``[NOT] EXISTS (SELECT ... FROM t WHERE t.k = s.k AND t.x > 3)``: a semi-join
  (anti-join) on the correlation equalities; the subquery's own conditions filter ``t``.
- ``x > (SELECT avg(v) FROM t)``: an uncorrelated scalar subquery, its one value beside
  every row.

Each becomes one boolean (or value) column added to the rows by a SubqueryJoin, which
reads the subquery's result whole before matching (as a lookup join reads its table);
WHERE then reads that column instead of the subquery, so the subquery may sit under
``OR``, ``NOT`` or ``CASE``. Each stream row stays one row: a subquery's duplicates never
multiply it. A subquery must read bounded tables; over a stream it is refused, pointing at
a join. Correlated references are equalities ``inner = outer`` among the subquery's
top-level WHERE conditions; other correlated shapes are refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from sqlglot import exp

from datum_sql.catalog import SourceEntry
from datum_sql.errors import PlanError
from datum_sql.plan import logical as lp
from datum_sql.plan.conditions import conjuncts
from datum_sql.plan.joinresidual import compile_residual
from datum_sql.plan.logical import Residual
from datum_sql.sql import statements as st
from datum_sql.sql.analyze import subqueries_in_scope
from datum_sql.sql.dialect import Datum

MARK = "__subquery"
PROBE = "__probe"
_JOIN_HINT = (
    "to match rows against another stream, write a join: an interval join "
    "(JOIN s2 ON s1.k = s2.k AND s1.ts BETWEEN s2.ts - INTERVAL '1' MINUTE AND s2.ts + "
    "INTERVAL '1' MINUTE), or a window join of two windowed aggregates ON a.window_end = "
    "b.window_end AND a.k = b.k"
)


@dataclass
class Outer:
    """The SELECT's input: its plan, the alias WHERE reads its columns by, and the input
    column a (qualified) column of the SELECT reads (None: not one of this input's)."""

    plan: lp.PlanNode
    table: str
    column: Callable[[exp.Column], str | None]


PlanQuery = Callable[[exp.Expr], lp.PlanNode]
Calc = Callable[[lp.PlanNode, exp.Select, st.Relation], lp.PlanNode]


def has_subqueries(node: exp.Expr | None) -> bool:
    return node is not None and bool(subqueries_in_scope(node))


def refuse_outside_where(select: exp.Select, *, where: bool = True) -> None:
    """Subqueries are planned in WHERE only (``where=False``: not even there)."""
    if not where and has_subqueries(select.args.get("where")):
        raise PlanError(
            "a subquery in a WHERE over a ranking's rows (WHERE rn <= N) or beside OVER (...) "
            "is not supported in streaming; filter the rows in a derived table beneath it: "
            "FROM (SELECT ... WHERE x IN (SELECT ...)) AS s"
        )
    places = {"expressions": "the SELECT list", "group": "GROUP BY", "having": "HAVING"}
    for key, what in places.items():
        value = select.args.get(key)
        for part in value if isinstance(value, list) else [value]:
            if has_subqueries(part):
                raise PlanError(
                    f"a subquery in {what} is not supported in streaming; write it in WHERE "
                    "(WHERE x IN (SELECT ...), WHERE EXISTS (...)), or join the table"
                )
    for join in select.args.get("joins") or []:
        if has_subqueries(join.args.get("on")):
            raise PlanError(
                "a subquery in a join's ON is not supported in streaming; write it in WHERE"
            )


def plan_where(
    select: exp.Select, outer: Outer, plan_query: PlanQuery, calc: Calc
) -> tuple[lp.PlanNode, exp.Select]:
    """``outer.plan`` with a SubqueryJoin per subquery of WHERE, and a copy of ``select``
    whose WHERE reads their columns instead."""
    if not has_subqueries(select.args.get("where")):
        return outer.plan, select
    select = select.copy()
    where = select.args["where"]
    plan = outer.plan
    taken = set(plan.schema.names)
    specs = [_spec(sub, outer, plan_query) for sub in subqueries_in_scope(where.this)]
    # outer keys that are not plain columns of the input are computed first, in one Calc
    computed: list[tuple[str, exp.Expr]] = []
    for spec in specs:
        for j, key in enumerate(spec.outer_keys):
            if isinstance(key, str):
                continue
            name = _fresh(PROBE, taken)
            computed.append((name, key))
            spec.outer_keys[j] = name
    if computed:
        plan = _with_probes(plan, outer, computed, calc)
    for spec in specs:
        name = _fresh(MARK, taken)
        mark_type = pa.bool_() if spec.mode != "scalar" else spec.table.schema.field(0).type
        schema = plan.schema
        if lp.OP_COLUMN in schema.names:  # a changelog's _op stays last
            i = schema.get_field_index(lp.OP_COLUMN)
            schema = schema.insert(i, pa.field(name, mark_type, True))
        else:
            schema = schema.append(pa.field(name, mark_type, True))
        plan = lp.SubqueryJoin(
            plan, spec.table, spec.mode, tuple(spec.outer_keys),  # type: ignore[arg-type]
            tuple(spec.table_keys), name, schema, spec.residual,
        )  # fmt: skip
        spec.node.replace(exp.column(name, outer.table, quoted=True))
    return plan, select


@dataclass
class _Spec:
    node: exp.Expr  # what WHERE reads: the EXISTS, the IN or the scalar subquery
    mode: str
    table: lp.PlanNode
    outer_keys: list[str | exp.Expr]
    table_keys: list[str]
    residual: Residual | None = None


def _spec(sub: exp.Expr, outer: Outer, plan_query: PlanQuery) -> _Spec:
    node: exp.Expr
    value: exp.Expr | None
    if isinstance(sub, exp.Exists):
        inner = sub.this
        mode, node, value = "exists", sub, None
    else:
        inner = sub.this if isinstance(sub, exp.Subquery) else sub
        parent = sub.parent
        if isinstance(parent, exp.Any | exp.All):
            raise PlanError(
                f"{parent.key.upper()} (SELECT ...) is not supported in streaming; write "
                "x IN (SELECT ...) or EXISTS (SELECT ... WHERE ...)"
            )
        if isinstance(parent, exp.In):
            if isinstance(parent.this, exp.Tuple):
                raise PlanError(
                    "(a, b) IN (SELECT ...) is not supported in streaming; write EXISTS "
                    "(SELECT 1 FROM t WHERE t.a = s.a AND t.b = s.b)"
                )
            mode, node, value = "in", parent, parent.this
        else:
            mode, node, value = "scalar", sub, None
    _check_bounded(inner)
    keys, rest, mixed = _correlation(inner, outer)
    if mixed and mode != "exists":
        raise PlanError(
            f"the correlated condition {_text(mixed[0])} of an IN subquery is not supported "
            "in streaming: correlate IN with equalities only, or write EXISTS (SELECT 1 FROM "
            "t WHERE t.v = s.x AND t.k = s.k AND ...)"
        )
    if keys and mode == "scalar":
        raise PlanError(
            "a correlated scalar subquery is not supported in streaming; write an "
            "uncorrelated one (x > (SELECT avg(v) FROM t)), EXISTS (SELECT ... WHERE t.k = "
            "s.k ...) or x IN (SELECT ...)"
        )
    if keys and not _plain(inner):
        raise PlanError(
            f"a correlated subquery that aggregates, groups or is a set operation is not "
            f"supported in streaming: {_text(inner)}; correlate a plain SELECT ... WHERE "
            "t.k = s.k, or aggregate without referring to the outer query"
        )
    outer_keys: list[str | exp.Expr] = [_outer_key(o, outer) for o, _ in keys]
    if keys:
        body = inner.copy()
        body.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
        items = [exp.alias_(i.copy(), f"__k{j}", quoted=True) for j, (_, i) in enumerate(keys)]
        if mode == "in":
            first = inner.expressions[0]
            items.append(exp.alias_(first.unalias().copy(), "__v", quoted=True))
        own = _aliases(inner)
        needed = _residual_columns(mixed, own)
        items += [exp.alias_(c.copy(), name, quoted=True) for c, name in needed.values()]
        body.set("expressions", items)
        table = plan_query(body)
        table_keys = [f"__k{j}" for j in range(len(keys))] + (["__v"] if mode == "in" else [])
        residual = _residual(mixed, own, needed, outer, table) if mixed else None
    else:
        table = plan_query(inner)
        table_keys = [table.schema.names[0]] if mode == "in" else []
        residual = None
    if mode == "in":
        assert value is not None
        outer_keys.append(_outer_key(value, outer))
    return _Spec(node, mode, table, outer_keys, table_keys, residual)


def _residual_columns(
    conds: list[exp.Expr], own: set[str]
) -> dict[tuple[str, str], tuple[exp.Column, str]]:
    """The subquery's columns the residual conditions read, each with the name the
    subquery's output gives it."""
    out: dict[tuple[str, str], tuple[exp.Column, str]] = {}
    for cond in conds:
        for col in _scoped_columns(cond):
            if col.table in own and (col.table, col.name) not in out:
                out[(col.table, col.name)] = (col, f"__r{len(out)}")
    return out


def _residual(
    conds: list[exp.Expr],
    own: set[str],
    needed: dict[tuple[str, str], tuple[exp.Column, str]],
    outer: Outer,
    table: lp.PlanNode,
) -> Residual:
    """The correlated conditions as one filter over (stream row, table row) pairs, whose
    columns are named ``l.<stream column>`` and ``r.<table column>``."""
    left: dict[str, None] = {}

    def column(col: exp.Column) -> str:
        if col.table in own:
            return f"r.{needed[(col.table, col.name)][1]}"
        name = outer.column(col)
        assert name is not None
        left[name] = None
        return f"l.{name}"

    for cond in conds:  # name the stream columns first: the pair schema lists them
        for col in _scoped_columns(cond):
            column(col)
    right = [name for _, name in needed.values()]
    schema = pa.schema(
        [pa.field(f"l.{n}", outer.plan.schema.field(n).type) for n in left]
        + [pa.field(f"r.{n}", table.schema.field(n).type) for n in right]
    )
    expr = compile_residual(conds, column, schema)
    return Residual(expr, tuple(left), tuple(right), " AND ".join(_text(c) for c in conds))


def _check_bounded(inner: exp.Expr) -> None:
    for table in inner.find_all(exp.Table):
        rel: st.Relation | None = table.meta.get("relation")
        entry = rel.entry if rel is not None else None
        if isinstance(entry, SourceEntry) and not entry.bounded:
            raise PlanError(
                f"a subquery in WHERE reads {entry.name!r}, a stream that does not end: a "
                "subquery is read whole before any row is matched, so it may read only "
                f"bounded tables (a file, a DuckDB table, an Arrow table); {_JOIN_HINT}"
            )


def _aliases(select: exp.Select) -> set[str]:
    """The aliases of a SELECT's FROM items (its own columns' tables)."""
    items = []
    if select.args.get("from_") is not None:
        items.append(select.args["from_"].this)
    items += [j.this for j in select.args.get("joins") or []]
    out = set()
    for item in items:
        rel = item.meta.get("relation")
        if rel is not None:
            out.add(rel.alias)
    return out


def _scoped_columns(node: exp.Expr) -> list[exp.Column]:
    """Columns under ``node``, not under its nested subqueries (planned on their own,
    with this subquery as their outer query)."""
    out: list[exp.Column] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, exp.Column):
            out.append(n)
        elif n is node or not isinstance(n, exp.Subquery | exp.Select | exp.Exists):
            stack.extend(n.iter_expressions())
    return out


def _correlation(
    inner: exp.Expr, outer: Outer
) -> tuple[list[tuple[exp.Expr, exp.Expr]], list[exp.Expr], list[exp.Expr]]:
    """The correlation equalities (outer expression, inner expression) of a subquery's
    WHERE, its conditions on its own columns, and its other correlated conditions (a
    residual on the matched pairs); refuses correlated references outside WHERE."""
    if not isinstance(inner, exp.Select):
        _refuse_correlated_set_operation(inner)
        return [], [], []
    own = _aliases(inner)

    def outer_refs(n: exp.Expr) -> list[exp.Column]:
        return [c for c in _scoped_columns(n) if c.table and c.table not in own]

    where = inner.args.get("where")
    keys: list[tuple[exp.Expr, exp.Expr]] = []
    rest: list[exp.Expr] = []
    mixed: list[exp.Expr] = []
    for cond in conjuncts(where.this) if where is not None else []:
        refs = outer_refs(cond)
        if not refs:
            rest.append(cond)
            continue
        pair = _equality(cond, outer_refs)
        if pair is None:
            mixed.append(cond)
        else:
            keys.append(pair)
    for correlated in [o for o, _ in keys] + mixed:
        for col in outer_refs(correlated):
            if outer.column(col) is None:
                raise PlanError(
                    f"a subquery refers to {_text(col)} of a query more than one level out; "
                    "correlate with the query just around it"
                )
    if mixed and not keys:
        raise PlanError(
            f"the correlated condition {_text(mixed[0])} of a subquery needs an equality "
            "beside it in streaming: correlate with equalities (t.k = s.k), then other "
            "conditions may compare the two queries' columns"
        )
    for key in ("expressions", "group", "having", "joins", "order"):
        if key == "expressions" and keys:
            continue  # replaced by the keys (and the IN value, checked below)
        value = inner.args.get(key)
        for part in value if isinstance(value, list) else [value]:
            if part is not None and outer_refs(part):
                raise PlanError(
                    f"a subquery refers to the outer query outside its WHERE "
                    f"({_text(part)}); correlate with equalities in its WHERE (t.k = s.k)"
                )
    if keys and outer_refs(inner.expressions[0]):
        raise PlanError(
            f"a subquery's SELECT list refers to the outer query ({_text(inner.expressions[0])}); "
            "select the subquery's own columns"
        )
    return keys, rest, mixed


def _refuse_correlated_set_operation(node: exp.Expr) -> None:
    """A set operation's branches must not refer to the outer query."""
    aliases = {a for select in node.find_all(exp.Select) for a in _aliases(select)}
    for col in node.find_all(exp.Column):
        if col.table and col.table not in aliases:
            raise PlanError(
                f"a correlated subquery with UNION is not supported in streaming "
                f"({_text(col)}); correlate a plain SELECT"
            )


def _equality(
    cond: exp.Expr, outer_refs: Callable[[exp.Expr], list[exp.Column]]
) -> tuple[exp.Expr, exp.Expr] | None:
    """(outer side, inner side) of ``outer_expr = inner_expr``, else None."""
    if not isinstance(cond, exp.EQ):
        return None
    a, b = cond.this, cond.expression
    for o, i in ((a, b), (b, a)):
        o_cols, i_cols = list(o.find_all(exp.Column)), list(i.find_all(exp.Column))
        if (
            o_cols
            and i_cols
            and len(outer_refs(o)) == len(o_cols)
            and not outer_refs(i)
            and not has_subqueries(o)
            and not has_subqueries(i)
        ):
            return o, i
    return None


def _plain(select: exp.Expr) -> bool:
    """A SELECT whose rows are its FROM rows filtered: its list can be replaced by keys."""
    if not isinstance(select, exp.Select):
        return False
    if any(select.args.get(k) for k in ("group", "having", "distinct", "limit", "offset")):
        return False
    return not any(e.find(exp.AggFunc) for e in select.expressions)


def _outer_key(node: exp.Expr, outer: Outer) -> str | exp.Expr:
    """The input column an outer key reads, or the expression computing it."""
    if isinstance(node, exp.Column):
        name = outer.column(node)
        if name is not None:
            return name
    for col in node.find_all(exp.Column):
        if outer.column(col) is None:
            raise PlanError(f"internal: {_text(col)} is not a column of the subquery's outer query")
    return node


def _with_probes(
    plan: lp.PlanNode, outer: Outer, computed: list[tuple[str, exp.Expr]], calc: Calc
) -> lp.PlanNode:
    """``plan`` with the computed outer keys as extra columns."""

    def swap(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column):
            name = outer.column(n)
            if name is not None:
                return exp.column(name, outer.table, quoted=True)
        return n

    items: list[exp.Expr] = [
        exp.column(c, outer.table, quoted=True) for c in plan.schema.names if c != lp.OP_COLUMN
    ]
    items += [exp.alias_(e.copy().transform(swap), n, quoted=True) for n, e in computed]
    body = exp.select(*items)
    rel = st.Relation(alias=outer.table, kind="subquery", columns=list(plan.schema.names))
    return calc(plan, body, rel)


def _fresh(prefix: str, taken: set[str]) -> str:
    n = 0
    while f"{prefix}{n}" in taken:
        n += 1
    taken.add(f"{prefix}{n}")
    return f"{prefix}{n}"


def _text(node: exp.Expr) -> str:
    out = node.copy()
    for ident in out.find_all(exp.Identifier):
        if ident.this.isidentifier() and ident.this == ident.this.lower():
            ident.set("quoted", False)
    return out.sql(dialect=Datum, normalize_functions="lower")
