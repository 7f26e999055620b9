"""A join's extra ON conditions (``AND l.id <> 'x' AND l.a > r.b``) as one
``pyarrow.compute`` expression over the joined columns, compiled once at planning (a
registered Python function is a ``pyarrow.compute`` function: :mod:`~datum_sql.engine.arrow_udfs`).

The join operator filters every batch of candidate pairs with it (NULL counts as false, as
in SQL's ON). What cannot be translated exactly is refused here, naming the condition:
the operator never evaluates SQL text per batch.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from datum_sql.engine import arrow_udfs, udfs
from datum_sql.errors import DatumError, PlanError
from datum_sql.plan.intervals import offset_of
from datum_sql.sql.dialect import Datum
from datum_sql.sql.types import arrow_type

_HINT = (
    "join conditions may use columns, literals, = <> < <= > >=, AND/OR/NOT, + - *, "
    "IS [NOT] NULL, [NOT] IN (...), BETWEEN, [NOT] LIKE 'pattern', CAST, COALESCE, "
    "upper/lower/abs/length, registered Python functions; "
    "write other conditions in WHERE (for an inner join they mean the same)"
)

_CMP: dict[type, Callable[[pc.Expression, pc.Expression], pc.Expression]] = {
    exp.EQ: lambda a, b: a == b,
    exp.NEQ: lambda a, b: a != b,
    exp.GT: lambda a, b: a > b,
    exp.GTE: lambda a, b: a >= b,
    exp.LT: lambda a, b: a < b,
    exp.LTE: lambda a, b: a <= b,
}
_ARITH: dict[type, str] = {
    exp.Add: "add_checked",
    exp.Sub: "subtract_checked",
    exp.Mul: "multiply_checked",
}
_FUNCS = {
    "upper": "utf8_upper",
    "lower": "utf8_lower",
    "abs": "abs_checked",
    "length": "utf8_length",
}


def compile_residual(
    conds: list[exp.Expr], column: Callable[[exp.Column], str], schema: pa.Schema
) -> pc.Expression | None:
    """The AND of ``conds`` over ``schema`` (the join's output), None when there are none.
    ``column`` names the output column a qualified column reference reads."""
    if not conds:
        return None
    out: pc.Expression | None = None
    for c in conds:
        e = _expr(c, column, c)
        out = e if out is None else out & e
    assert out is not None
    try:  # types are checked now, on no rows, not when the first pair arrives
        schema.empty_table().filter(out)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        text = " AND ".join(_text(c) for c in conds)
        raise PlanError(
            f"join condition {text} cannot be evaluated: {exc}; cast to one type, e.g. "
            "CAST('2024-01-01' AS TIMESTAMP) beside a TIMESTAMP column"
        ) from None
    return out


def _expr(node: exp.Expr, column: Callable[[exp.Column], str], whole: exp.Expr) -> pc.Expression:
    def sub(n: exp.Expr) -> pc.Expression:
        return _expr(n, column, whole)

    if node.args.get("negate"):  # x NOT LIKE p, x IS NOT NULL: the node, negated
        positive = node.copy()
        positive.set("negate", None)
        return ~sub(positive)
    if isinstance(node, exp.Paren):
        return sub(node.this)
    if isinstance(node, exp.Column):
        return pc.field(column(node))
    if isinstance(node, exp.Neg) and not isinstance(node.this, exp.Literal):
        return pc.Expression._call("negate_checked", [sub(node.this)])
    if isinstance(node, exp.Literal | exp.Boolean | exp.Null | exp.Neg | exp.Interval):
        return pc.scalar(_literal(node, whole))
    if isinstance(node, exp.Cast) and not isinstance(node, exp.TryCast):
        target = _arrow_type(node, whole)
        if isinstance(node.this, exp.Literal | exp.Null):  # a typed literal: cast it now
            try:
                return pc.scalar(pa.scalar(_literal(node.this, whole)).cast(target))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise PlanError(f"join condition {_text(whole)}: {_text(node)}: {exc}") from None
        return pc.Expression._call("cast", [sub(node.this)], pc.CastOptions(target))
    if type(node) in _CMP:
        return _CMP[type(node)](sub(node.this), sub(node.expression))
    if isinstance(node, exp.And):
        return sub(node.this) & sub(node.expression)
    if isinstance(node, exp.Or):
        return sub(node.this) | sub(node.expression)
    if isinstance(node, exp.Not):
        return ~sub(node.this)
    if type(node) in _ARITH:
        return pc.Expression._call(_ARITH[type(node)], [sub(node.this), sub(node.expression)])
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return sub(node.this).is_null()
    if isinstance(node, exp.Between):
        x = sub(node.this)
        return (x >= sub(node.args["low"])) & (x <= sub(node.args["high"]))
    if isinstance(node, exp.In) and node.expressions and not node.args.get("query"):
        x = sub(node.this)
        out = None
        for v in node.expressions:
            e = x == sub(v)
            out = e if out is None else out | e
        return out  # type: ignore[return-value]
    if isinstance(node, exp.Like) and isinstance(node.expression, exp.Literal):
        pattern = node.expression.this
        return pc.Expression._call(
            "match_like", [sub(node.this)], pc.MatchSubstringOptions(pattern)
        )
    if isinstance(node, exp.Coalesce):
        args = [sub(node.this), *(sub(a) for a in node.expressions)]
        return pc.Expression._call("coalesce", args)
    if isinstance(node, exp.Anonymous) and node.name.lower() in udfs.registered():
        return _udf_call(node, [sub(a) for a in node.expressions], whole)
    name = type(node).__name__.lower()
    if isinstance(node, exp.Upper | exp.Lower | exp.Abs | exp.Length) and name in _FUNCS:
        return pc.Expression._call(_FUNCS[name], [sub(node.this)])
    raise PlanError(f"join condition {_text(whole)}: {_text(node)} is not supported in ON; {_HINT}")


def _udf_call(node: exp.Anonymous, args: list[pc.Expression], whole: exp.Expr) -> pc.Expression:
    udf = udfs.registered()[node.name.lower()]
    if len(args) != len(udf.input_types) or not args:
        want = len(udf.input_types)
        raise PlanError(
            f"join condition {_text(whole)}: {udf.name}() takes {want} arguments, got "
            f"{len(args)}" + ("" if want else "; compute it in a subquery and join on its column")
        )
    return arrow_udfs.call(udf, args)


def _arrow_type(node: exp.Cast, whole: exp.Expr) -> pa.DataType:
    try:
        return arrow_type(node.to, column=_text(node.this))
    except DatumError as exc:
        raise PlanError(f"join condition {_text(whole)}: {exc}") from None


def _literal(node: exp.Expr, whole: exp.Expr) -> object:
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Interval):
        return dt.timedelta(microseconds=offset_of(node))
    if isinstance(node, exp.Neg):
        value = _literal(node.this, whole)
        if isinstance(value, int | Decimal | float):
            return -value
        raise PlanError(f"join condition {_text(whole)}: cannot negate {_text(node.this)}")
    assert isinstance(node, exp.Literal)
    if node.is_string:
        return node.this
    text = node.this
    if "." in text or "e" in text.lower():
        return float(text) if "e" in text.lower() else Decimal(text)
    return int(text)


def _text(node: exp.Expr) -> str:
    """A piece of the query as the user would write it, for errors: plain names unquoted."""
    out = node.copy()
    for ident in out.find_all(exp.Identifier):
        if ident.this.isidentifier() and ident.this == ident.this.lower():
            ident.set("quoted", False)
    return out.sql(dialect=Datum, normalize_functions="lower")
