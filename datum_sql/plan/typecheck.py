"""Type-checks a query at planning, with the same messages for streaming and ``ctx.sql``.

Both run this over the query's batch form (plain SQL over the source tables, held empty):
DataFusion plans it, and when it cannot, each SELECT is probed clause by clause to name
the expression at fault as the user wrote it. Then comparisons are checked: DataFusion
would compare a VARCHAR with a number (or a timestamp) by casting every string, failing
on the first row that is not a number; as in PostgreSQL, that comparison is refused unless
the string is a literal. Operands the plan already types (columns of the source tables,
literals, arithmetic on numbers) are typed from the tables' schemas; DataFusion types the
others over the empty tables, and every operand of a SELECT that may be refused, so the
refusal names the types DataFusion gives.
"""

from __future__ import annotations

import re

import datafusion
import pyarrow as pa
from sqlglot import exp

from datum_sql.errors import PlanError
from datum_sql.plan import distinct, list_order, over_functions
from datum_sql.plan.engines import DataFusion
from datum_sql.plan.infer import plan_error, planning_session
from datum_sql.sql.dialect import Datum
from datum_sql.sql.types import sql_type

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
                exp.NullSafeNEQ, exp.Between, exp.In)  # fmt: skip
_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
#: What the plan knows of a numeric literal or of arithmetic on numbers: a number.
_NUMBER = pa.float64()
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")
#: DataFusion functions that mean nothing here, or whose result streaming cannot give, by
#: name: why. Both paths refuse them with this reason (plan/function_list.py leaves them
#: off the list).
REFUSED = {
    "approx_percentile_cont_with_weight": (
        "DataFusion estimates it from a t-digest, whose result no exact definition gives "
        "(values 1, 2, 4 of weights 1, 3, 2: 2.25, where repeating each value by its weight "
        "gives 2.0); for integer weights repeat the values and take percentile_cont(y, q) "
        "over (SELECT unnest(array_repeat(x, w)) AS y FROM t)"
    ),
    "file_row_index": "it numbers the rows of a file DataFusion scans itself",
    "input_file_name": "it names a file DataFusion scans itself",
    "union_extract": "no SQL type of datum-sql is an Arrow union",
    "union_tag": "no SQL type of datum-sql is an Arrow union",
}


def refuse_unsupported(ast: exp.Expr) -> None:
    """PlanError for the first call of a :data:`REFUSED` function in ``ast``, then for the
    first aggregate no window function computes (:func:`datum_sql.plan.over_functions.refuse`),
    then for the first aggregate that takes no DISTINCT (:func:`datum_sql.plan.distinct.refuse`),
    then for the first list of rows in no defined order (:func:`datum_sql.plan.list_order.refuse`)."""
    for fn in ast.find_all(exp.Anonymous):
        why = REFUSED.get(fn.name.lower())
        if why is not None:
            raise PlanError(f"{fn.name.lower()}() is not supported: {why}")
    over_functions.refuse(ast)
    distinct.refuse(ast)
    list_order.refuse(ast)


def check(ast: exp.Expr, tables: dict[str, pa.Schema]) -> None:
    """PlanError for the first expression of ``ast`` (DataFusion SQL over ``tables``, each
    named as the SQL quotes it) that cannot be typed, or that compares text with non-text."""
    refuse_unsupported(ast)
    session = planning_session({f'"{name}"': schema for name, schema in tables.items()})
    if plan_error(session, ast.sql(dialect=DataFusion)) is not None:
        at, message = _locate(session, ast)
        raise PlanError(f"cannot evaluate {user_text(at)}: {message}")
    for select in ast.find_all(exp.Select):
        _check_comparisons(session, select, tables)


def user_text(node: exp.Expr) -> str:
    """``node`` in the user's terms: names unquoted, columns without their table unless
    the SELECT joins tables."""
    select = node if isinstance(node, exp.Select) else node.find_ancestor(exp.Select)
    joined = select is not None and bool(select.args.get("joins"))

    def plain(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column) and not joined:
            n = exp.column(n.args["this"].copy())
        for ident in n.find_all(exp.Identifier):
            if _PLAIN_NAME.fullmatch(ident.this):
                ident.set("quoted", False)
        return n

    target = node.unalias() if isinstance(node, exp.Alias) else node
    return target.copy().transform(plain).sql(dialect=Datum, normalize_functions="lower")


# -- naming the expression at fault -----------------------------------------------------------


def _locate(session: datafusion.SessionContext, node: exp.Expr) -> tuple[exp.Expr, str]:
    """The innermost part of ``node`` (a query) DataFusion refuses, and why."""
    if isinstance(node, exp.Subquery):
        return _locate(session, node.this)
    if isinstance(node, exp.SetOperation):
        for side in (node.left, node.right):
            if _fails(session, side):
                return _locate(session, side)
        return node, _fails(session, node) or "cannot be planned"
    message = _fails(session, node) or "cannot be planned"
    if not isinstance(node, exp.Select):
        return node, message
    for source in _sources(node):
        if isinstance(source, exp.Subquery) and _fails(session, source.this):
            return _locate(session, source.this)
    base = node.copy()
    for clause in ("order", "limit", "offset", "distinct"):
        base.set(clause, None)
    one: list[exp.Expr] = [exp.Literal.number(1)]
    probes: list[tuple[exp.Expr, exp.Select]] = []
    for join in base.args.get("joins") or []:
        if join.args.get("on") is not None:
            probes.append((join.args["on"], _probe(base, one)))
    probes += [(item, _probe(base, [item], group=True)) for item in base.expressions]
    if base.args.get("where"):
        probes.append((base.args["where"].this, _probe(base, one, where=True)))
    for key in base.args["group"].expressions if base.args.get("group") else []:
        probe = _probe(base, one)
        probe.set("group", exp.Group(expressions=[key.copy()]))
        probes.append((key, probe))
    if base.args.get("having"):
        probes.append((base.args["having"].this, _probe(base, one, group=True, having=True)))
    for at, probe in probes:
        why = _fails(session, probe)
        if why:
            return at, why
    return node, message


def _probe(
    select: exp.Select,
    items: list[exp.Expr],
    *,
    where: bool = False,
    group: bool = False,
    having: bool = False,
) -> exp.Select:
    """``select`` with ``items`` as its SELECT list and only the clauses asked for."""
    probe = select.copy()
    probe.set("expressions", [i.copy() for i in items])
    for clause, keep in (("where", where), ("group", group), ("having", having)):
        if not keep:
            probe.set(clause, None)
    return probe


def _fails(session: datafusion.SessionContext, node: exp.Expr) -> str | None:
    return plan_error(session, node.sql(dialect=DataFusion))


def _sources(select: exp.Select) -> list[exp.Expr]:
    from_ = select.args.get("from_")
    out = [from_.this] if from_ is not None else []
    return out + [j.this for j in select.args.get("joins") or []]


# -- comparisons ------------------------------------------------------------------------------


def _check_comparisons(
    session: datafusion.SessionContext, select: exp.Select, tables: dict[str, pa.Schema]
) -> None:
    comparisons = [c for c in _in_scope(select) if isinstance(c, _COMPARISONS)]
    if not comparisons:
        return
    operands = [op for c in comparisons for op in _operands(c)]
    known = _typed(select, operands, tables)
    if known is not None and not any(_mixed(c, known) for c in comparisons):
        return  # every operand typed by the plan, and none compares text with non-text
    types = types_of(session, select, operands)
    if types is None:
        return  # an operand only this SELECT's clauses can type (an alias): DataFusion decides
    type_of = dict(zip(map(id, operands), types, strict=True))
    for c in comparisons:
        mixed = _mixed(c, type_of)
        if mixed is not None:
            text, other = mixed
            want = sql_type(type_of[id(other)])
            raise PlanError(
                f"cannot compare {user_text(text)} (VARCHAR) with {user_text(other)} ({want}) "
                f"in {user_text(c)}: cast one side, e.g. CAST({user_text(text)} AS {want})"
            )


def _mixed(c: exp.Expr, type_of: dict[int, pa.DataType]) -> tuple[exp.Expr, exp.Expr] | None:
    """The first text operand of comparison ``c`` (not a string literal) and the first
    operand that is neither text nor NULL, when it has both."""
    ops = _operands(c)
    texts = [o for o in ops if _is_text(type_of[id(o)]) and not _is_string_literal(o)]
    others = [o for o in ops if not _is_text(type_of[id(o)]) and type_of[id(o)] != pa.null()]
    return (texts[0], others[0]) if texts and others else None


def _typed(
    select: exp.Select, operands: list[exp.Expr], tables: dict[str, pa.Schema]
) -> dict[int, pa.DataType] | None:
    """The types of ``operands`` where the plan knows them all without DataFusion, else None.

    A column qualified by a FROM item that is a source table has its schema's type; a
    literal its kind's (the number's exact type is left to DataFusion, which only a refusal
    names); arithmetic on numbers is a number."""
    schemas: dict[str, pa.Schema] = {}
    for source in _sources(select):
        rel = source.meta.get("relation") if isinstance(source, exp.Table) else None
        if rel is not None and rel.entry is not None and rel.entry.name in tables:
            schemas[source.alias_or_name] = tables[rel.entry.name]
    types: dict[int, pa.DataType] = {}
    for o in operands:
        t = _type_from(o, schemas)
        if t is None:
            return None
        types[id(o)] = t
    return types


def _type_from(node: exp.Expr, schemas: dict[str, pa.Schema]) -> pa.DataType | None:
    if isinstance(node, exp.Paren):
        return _type_from(node.this, schemas)
    if isinstance(node, exp.Column):
        schema = schemas.get(node.table)
        if schema is None or node.name not in schema.names:
            return None
        return schema.field(node.name).type
    if isinstance(node, exp.Null):
        return pa.null()
    if isinstance(node, exp.Boolean):
        return pa.bool_()
    if isinstance(node, exp.Literal):
        return pa.string() if node.is_string else _NUMBER
    parts = [node.this] if isinstance(node, exp.Neg) else None
    if isinstance(node, _ARITHMETIC):
        parts = [node.this, node.expression]
    if parts is None:
        return None
    types = [_type_from(p, schemas) for p in parts]
    if all(t is not None and _is_number(t) for t in types):
        return _NUMBER
    return None


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _in_scope(select: exp.Select) -> list[exp.Expr]:
    """The nodes of ``select``'s own clauses, not those of its subqueries."""
    roots: list[exp.Expr] = list(select.expressions)
    for clause in ("where", "having"):
        if select.args.get(clause) is not None:
            roots.append(select.args[clause])
    roots += [j.args["on"] for j in select.args.get("joins") or [] if j.args.get("on")]
    out: list[exp.Expr] = []
    stack = roots
    while stack:
        n = stack.pop()
        if isinstance(n, exp.Subquery | exp.Select):
            continue
        out.append(n)
        stack.extend(n.iter_expressions())
    return out


def _operands(c: exp.Expr) -> list[exp.Expr]:
    if isinstance(c, exp.Between):
        return [c.this, c.args["low"], c.args["high"]]
    if isinstance(c, exp.In):
        return [c.this, *c.expressions]
    return [c.this, c.expression]


def types_of(
    session: datafusion.SessionContext, select: exp.Select, operands: list[exp.Expr]
) -> list[pa.DataType] | None:
    """The types of ``operands`` in ``select``'s FROM (aggregates in its GROUP BY)."""
    types: dict[int, pa.DataType] = {}
    row_level = [o for o in operands if not o.find(exp.AggFunc)]
    grouped = [o for o in operands if o.find(exp.AggFunc)]
    for part, keep_group in ((row_level, False), (grouped, True)):
        if not part:
            continue
        probe = select.copy()
        for clause in ("where", "having", "order", "limit", "offset", "distinct", "qualify"):
            probe.set(clause, None)
        if not keep_group:
            probe.set("group", None)
        probe.set(
            "expressions", [exp.alias_(o.copy(), f"_{i}", quoted=True) for i, o in enumerate(part)]
        )
        try:
            schema = session.sql(probe.sql(dialect=DataFusion)).schema()
        except Exception:  # DataFusion raises plain Exception subclasses
            return None
        types.update({id(o): schema.field(i).type for i, o in enumerate(part)})
    return [types[id(o)] for o in operands]


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _is_string_literal(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and node.is_string
